//go:build unix

package torture

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unique"
)

// proc is one worker process (one incarnation of a worker slot).
type proc struct {
	slot   int
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	done   chan struct{} // closed once the process has been reaped
	err    error         // its exit status, once done
	quiet  chan struct{} // closed when it reported quiet

	mu      sync.Mutex
	killed  bool // SIGKILL by the injector
	stopped bool // SIGSTOP in effect
}

// spawn starts worker incarnation inc of slot, re-executing the test
// binary; its events go to rec.
func (r *runner) spawn(slot, inc int) (*proc, error) {
	cfg := workerConfig{ID: fmt.Sprintf("w%d.%d", slot, inc), Slot: slot, Addr: r.srv.Addr(), ProxyAddr: r.proxies[slot].Addr(),
		QuorumAddrs: r.quorum.addrs(slot),
		Seed:        r.opts.Seed*1000003 + uint64(slot)*7919 + uint64(inc), Goroutines: r.opts.Goroutines,
		Weights: r.opts.Weights}
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{slot: slot, id: cfg.ID, cmd: cmd, stderr: &tailBuffer{max: 256 << 10},
		done: make(chan struct{}), quiet: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.rec.add(Event{K: kSpawn, W: cfg.ID, Msg: fmt.Sprintf("pid %d", cmd.Process.Pid)})
	go func() {
		r.read(p, out)
		p.err = cmd.Wait()
		r.rec.add(Event{K: kExit, W: p.id, Msg: fmt.Sprint(p.err)})
		close(p.done)
	}()
	return p, nil
}

// read parses the worker's events until its stdout closes.
func (r *runner) read(p *proc, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	quiet := false
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			r.rec.add(Event{K: kFatal, W: p.id, Msg: fmt.Sprintf("unparsable event %q: %v", sc.Text(), err)})
			continue
		}
		e.W = p.id
		intern(&e)
		r.rec.addRaw(e, sc.Bytes())
		if e.K == kQuiet && !quiet {
			quiet = true
			close(p.quiet)
		}
	}
	_, _ = io.Copy(io.Discard, out)
}

func (p *proc) signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// send writes a command line to the worker.
func (p *proc) send(cmd string) {
	_, _ = io.WriteString(p.stdin, cmd+"\n")
}

// wait waits for the process to exit, at most d.
func (p *proc) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// problems returns what its stderr shows went wrong: a race, a panic,
// leaked goroutines.
func (p *proc) problems() []string {
	s := p.stderr.String()
	var out []string
	for _, m := range []string{"WARNING: DATA RACE", "panic:", "fatal error:", "goroutines left behind"} {
		if strings.Contains(s, m) {
			out = append(out, m)
		}
	}
	return out
}

// tailBuffer keeps the last max bytes written to it (plus the first
// max/4, where a panic's first lines are).
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	head []byte
	buf  []byte
	cut  bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max/4 - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut {
		return string(b.head) + "\n[…]\n" + string(b.buf)
	}
	return string(b.buf)
}

// intern makes the strings that events repeat (kinds, clients, scenarios,
// names, sides, error classes) share one copy: a soak keeps millions of
// events in memory.
func intern(e *Event) {
	e.K = unique.Make(e.K).Value()
	e.Client = unique.Make(e.Client).Value()
	e.Scn = unique.Make(e.Scn).Value()
	e.EK = unique.Make(e.EK).Value()
	for i, n := range e.Names {
		e.Names[i] = unique.Make(n).Value()
	}
	for i, s := range e.Sides {
		e.Sides[i] = unique.Make(s).Value()
	}
}
