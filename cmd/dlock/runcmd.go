package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// runSynopsis is run's usage line.
const runSynopsis = "dlock run [--redis URL] [--prefix P] [--ttl 30s] [--grace 5s] [--quiet] NAME -- CMD [ARGS...]"

// Exit statuses of run besides the child's own.
const (
	exitCannotRun = 126 // the command could not be started
	exitNotFound  = 127 // the command was not found
	// childWaitDelay bounds how long run waits, after the child exited,
	// for processes it left behind to close the output they inherited.
	childWaitDelay = time.Second
)

// runConfig is run's command line.
type runConfig struct {
	url, prefix, name string
	ttl, grace        time.Duration
	quiet             bool
	argv              []string
}

// runCmd is "dlock run": it takes the lock NAME (waiting for it; a signal
// gives up), runs CMD with DLOCK_NAME and DLOCK_FENCE in its environment,
// and releases the lock when CMD exits. If the lease is lost meanwhile,
// CMD is sent SIGTERM, then SIGKILL after the grace period. A SIGINT or
// SIGTERM that run receives is passed on to CMD in the same way.
//
// The exit status is CMD's (128+n if signal n ended it); 1 if the lease
// was lost and CMD's status was 0; 1 for Redis errors, 126 if CMD could
// not be started, 127 if it was not found, 128+n if signal n came before
// CMD was started; 2 for a bad command line.
func runCmd(args []string, stdout, stderr io.Writer) int {
	var c runConfig
	fs := newFlags("run")
	fs.StringVar(&c.url, "redis", defaultRedisURL, "the Redis `URL`")
	fs.StringVar(&c.prefix, "prefix", dlock.DefaultPrefix, "key `prefix` of the lock")
	fs.DurationVar(&c.ttl, "ttl", dlock.DefaultTTL, "lease time to live, renewed every ttl/3 while CMD runs")
	fs.DurationVar(&c.grace, "grace", 5*time.Second, "after SIGTERM, how long CMD may take before SIGKILL")
	fs.BoolVar(&c.quiet, "quiet", false, "print only errors (not the waiting and holding notes)")
	if code, ok := parseFlags(fs, runSynopsis, args, stdout, stderr); !ok {
		return code
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usageError(stderr, runSynopsis, "missing the lock NAME")
	}
	c.name, c.argv = rest[0], rest[1:]
	if len(c.argv) > 0 && c.argv[0] == "--" {
		c.argv = c.argv[1:]
	}
	switch {
	case c.name == "":
		return usageError(stderr, runSynopsis, "empty lock NAME")
	case len(c.argv) == 0:
		return usageError(stderr, runSynopsis, "missing the command to run")
	case c.ttl < 10*time.Millisecond:
		return usageError(stderr, runSynopsis, "--ttl %v: want at least 10ms", c.ttl)
	case c.grace < 0:
		return usageError(stderr, runSynopsis, "--grace %v: must not be negative", c.grace)
	}
	if err := checkPrefix(c.prefix); err != nil {
		return usageError(stderr, runSynopsis, "%v", err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return c.run(sigs, stdout, stderr)
}

// run holds the lock around the child. sigs delivers the signals that end
// a wait or are passed on to the child.
func (c runConfig) run(sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	note := func(format string, a ...any) {
		if !c.quiet {
			complain(stderr, format, a...)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Until the child runs, a signal cancels what is in progress.
	var (
		sigMu sync.Mutex
		sig   os.Signal
	)
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case s := <-sigs:
			sigMu.Lock()
			sig = s
			sigMu.Unlock()
			cancel()
		case <-stopWatch:
		}
	}()
	interrupted := func() os.Signal {
		sigMu.Lock()
		defer sigMu.Unlock()
		return sig
	}

	rdb, err := dial(ctx, c.url)
	if err != nil {
		close(stopWatch)
		<-watchDone
		if s := interrupted(); s != nil {
			return signalStatus(s)
		}
		complain(stderr, "%v", err)
		return exitFail
	}
	defer rdb.Close()
	client, err := dlock.New(rdb, dlock.WithPrefix(c.prefix))
	if err != nil {
		close(stopWatch)
		<-watchDone
		complain(stderr, "%v", err)
		return exitFail
	}
	defer client.Close()

	m := client.Mutex(c.name, dlock.WithTTL(c.ttl))
	lease, err := m.TryLock(ctx)
	if errors.Is(err, dlock.ErrNotObtained) && ctx.Err() == nil {
		note("lock %q is held by another owner; waiting (Ctrl-C gives up)", c.name)
		lease, err = m.Lock(ctx)
	}
	close(stopWatch)
	<-watchDone
	if s := interrupted(); s != nil {
		if err == nil {
			_ = unlock(lease)
		}
		complain(stderr, "%v: gave up waiting for lock %q", s, c.name)
		return signalStatus(s)
	}
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	note("holding lock %q, fence %d; running %s", c.name, lease.Fence(), quoteArgs(c.argv))

	code := c.runChild(lease, sigs, stdout, stderr)
	if err := unlock(lease); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		complain(stderr, "%v", err)
		if code == exitOK {
			code = exitFail
		}
	}
	return code
}

// runChild runs the command while lease is held and returns the exit
// status (see runCmd).
func (c runConfig) runChild(lease *dlock.Lease, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"DLOCK_NAME="+c.name,
		"DLOCK_FENCE="+strconv.FormatInt(lease.Fence(), 10))
	cmd.WaitDelay = childWaitDelay
	if err := cmd.Start(); err != nil {
		complain(stderr, "%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	select {
	case err := <-exited:
		code := exitStatus(cmd, err)
		if lerr := lease.Err(); lerr != nil {
			complain(stderr, "the lease ended while %s ran: %v", c.argv[0], lerr)
			if code == exitOK {
				code = exitFail
			}
		}
		return code
	case <-lease.Done():
		complain(stderr, "%v; stopping %s (SIGTERM, SIGKILL after %v)", lease.Err(), c.argv[0], c.grace)
		code := exitStatus(cmd, stopChild(cmd, exited, syscall.SIGTERM, c.grace, sigs))
		if code == exitOK {
			code = exitFail
		}
		return code
	case s := <-sigs:
		complain(stderr, "%v: passing it on to %s (SIGKILL after %v)", s, c.argv[0], c.grace)
		return exitStatus(cmd, stopChild(cmd, exited, s, c.grace, sigs))
	}
}

// stopChild sends sig to the child and waits for it to exit, sending
// SIGKILL when grace has passed or another signal arrives. It returns what
// Wait returned.
func stopChild(cmd *exec.Cmd, exited <-chan error, sig os.Signal, grace time.Duration, sigs <-chan os.Signal) error {
	_ = cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return err
	case <-t.C:
	case <-sigs:
	}
	_ = cmd.Process.Kill()
	return <-exited
}

// exitStatus is the shell's view of how the child ended: its exit code,
// or 128+n if signal n killed it.
func exitStatus(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		if err != nil {
			return exitFail
		}
		return exitOK
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return signalStatus(ws.Signal())
	}
	return ps.ExitCode()
}

// signalStatus is the exit status for a process ended by sig: 128+n.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFail
}

// quoteArgs renders argv for a message, quoting the words that need it.
func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?;&|<>(){}") {
			q[i] = strconv.Quote(a)
		}
	}
	return strings.Join(q, " ")
}
