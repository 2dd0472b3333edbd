package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// fleet is the demo's worker processes: copies of this binary running
// the hidden demo-worker command. Their event lines go to the show, their
// error output to the demo's stderr, prefixed with the worker's name.
type fleet struct {
	procs []*workerProc
	sh    *show
	ready chan bool // one value per worker: true once it is ready, false if it ended before
}

// workerProc is one worker process.
type workerProc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pipes sync.WaitGroup // the goroutines reading its stdout and stderr
	err   error          // how it exited, once fleet.wait has returned
}

// startFleet starts c.workers worker processes, which connect to the
// Redis at url and then wait for run's go-ahead. The workers stop when ctx
// ends. On error the workers already started are stopped.
func startFleet(ctx context.Context, c demoConfig, url, dir string, sh *show, stderr io.Writer) (*fleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the workers: %w", err)
	}
	f := &fleet{sh: sh, ready: make(chan bool, c.workers)}
	errw := &lockedWriter{w: stderr}
	for id := 1; id <= c.workers; id++ {
		wc := workerConfig{id: id, url: url, prefix: c.prefix, rounds: c.rounds,
			ttl: demoTTL, job: demoJob, history: filepath.Join(dir, fmt.Sprintf(historyFile, id))}
		if err := f.start(ctx, exe, wc, errw); err != nil {
			f.closeStdins()
			f.wait()
			return nil, fmt.Errorf("starting worker %d: %w", id, err)
		}
	}
	return f, nil
}

// start starts one worker and the goroutines that read its output.
func (f *fleet) start(ctx context.Context, exe string, wc workerConfig, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, exe, wc.args()...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = workerGrace
	setProcAttr(cmd, false)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &workerProc{id: wc.id, cmd: cmd, stdin: stdin}
	f.procs = append(f.procs, p)
	who := fmt.Sprintf("worker %d", wc.id)
	p.pipes.Add(2)
	go func() {
		defer p.pipes.Done()
		f.relayEvents(who, stdout)
	}()
	go func() {
		defer p.pipes.Done()
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			fmt.Fprintf(stderr, "%s: %s\n", who, sc.Text())
		}
		_, _ = io.Copy(io.Discard, errOut)
	}()
	return nil
}

// relayEvents turns a worker's event lines into show events, and reports
// its readiness on f.ready.
func (f *fleet) relayEvents(who string, r io.Reader) {
	ready := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		at, ev, fence, detail, ok := parseWorkerLine(sc.Text())
		switch {
		case !ok:
			f.sh.event(time.Now(), who, sc.Text())
		case ev == evReady:
			if !ready {
				ready = true
				f.ready <- true
			}
		case ev == evLost:
			f.sh.event(at, who, lockEvent("LOST", fence, detail))
		default:
			f.sh.event(at, who, lockEvent(ev, fence, detail))
		}
	}
	_, _ = io.Copy(io.Discard, r) // after a line too long for the scanner
	if !ready {
		f.ready <- false
	}
}

// run waits until every worker is ready, gives them the go-ahead at once,
// and waits for them to finish. It returns an error when the workers
// could not all be started; how each worker ended is in failures.
func (f *fleet) run(ctx context.Context) error {
	err := f.awaitReady(ctx)
	if err == nil {
		f.sh.event(time.Now(), "demo", fmt.Sprintf("%d worker processes connected: go!", len(f.procs)))
		for _, p := range f.procs {
			if _, werr := io.WriteString(p.stdin, workerGo+"\n"); werr != nil {
				err = errors.Join(err, fmt.Errorf("worker %d: %w", p.id, werr))
			}
		}
	}
	f.closeStdins() // a worker still waiting for the go-ahead gives up
	f.wait()
	return err
}

// awaitReady waits for every worker's readiness report.
func (f *fleet) awaitReady(ctx context.Context) error {
	t := time.NewTimer(readyWait)
	defer t.Stop()
	for range f.procs {
		select {
		case ok := <-f.ready:
			if !ok {
				return errors.New("a worker exited before it was ready")
			}
		case <-t.C:
			return fmt.Errorf("the workers were not ready after %v", readyWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// closeStdins closes every worker's standard input.
func (f *fleet) closeStdins() {
	for _, p := range f.procs {
		p.stdin.Close()
	}
}

// wait waits for every worker to exit and its output to be relayed.
func (f *fleet) wait() {
	for _, p := range f.procs {
		p.pipes.Wait() // before Wait, which closes the pipes
		p.err = p.cmd.Wait()
	}
}

// failures describes the workers that did not exit successfully.
func (f *fleet) failures() []string {
	var out []string
	for _, p := range f.procs {
		if p.err != nil {
			out = append(out, fmt.Sprintf("worker %d: %v", p.id, p.err))
		}
	}
	return out
}

// lockedWriter serialises writes to w, one Write call per line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p to the underlying writer under the lock.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
