//go:build unix

package main

// The process group that "dlock run" runs its command in.
//
// run does not start CMD itself. It starts a guard — this same program as
// the hidden command "run-guard" (guard_unix.go) — as the leader of a new
// process group (Setpgid), and the guard starts CMD in that group. CMD and
// whatever it starts stay in the group unless they leave it (setsid,
// setpgid), so kill(-pgid, sig) reaches all of them, grandchildren
// included. Why a guard, and why as the leader:
//
//   - The lifeline. run holds the only write end of a pipe whose read end
//     is the guard's fd 3, and never writes to it. However run ends —
//     exit, panic, SIGKILL, the OOM killer — the kernel closes its
//     descriptors, the guard reads EOF and sends SIGKILL to its own group:
//     CMD, its descendants and the guard itself. This needs no Linux
//     feature; Pdeathsig alone would reach only a direct child, never the
//     grandchildren. The guard itself has no Pdeathsig: it must outlive run
//     for the moment it takes to kill the group, and the lifeline tells it
//     of run's death as soon as the kernel would (exit closes descriptors
//     before it sends the parent-death signal).
//   - No stranger is ever signalled. The group's id is the guard's pid,
//     and a pid is not reused while a process of that group exists, a
//     zombie included. The guard is in the group until it dies, and run
//     reaps it only after its last kill(-pgid), so every kill(-pgid, …)
//     that run or the guard sends reaches this group or nobody.
//   - Nothing outlives the lock. When CMD exits, the guard reports its
//     status on the status pipe (fd 4), then SIGKILLs the group, so what
//     CMD left running in the background dies before run releases the lock.
//     If the guard dies without reporting (someone killed it), run
//     SIGKILLs the group itself.
//
// run passes on the signals it receives to the whole group; the guard
// catches them (signal.Notify, never read) and so survives them, while CMD
// starts with the default dispositions (a caught signal is reset by exec,
// an ignored one would stay ignored: the guard does not ignore them).
// Signals that come before the guard has said "started" are held back
// until it has, because until then the guard may not have its handlers.
//
// What remains: a process that leaves the group (setsid, a daemon that
// double-forks into its own session) escapes all this. If run and the
// guard are both killed at once (kill -9 of both), on Linux CMD dies too
// (Pdeathsig, set by the guard) but its descendants are left. CMD runs in
// a background process group: if it reads from the terminal it is stopped
// (SIGTTIN), so run is for commands that do not.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// groupSignals are the signals that run catches for its whole life and
// passes on to CMD's process group.
var groupSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2}

// stops reports whether sig, received by run, asks it to stop: to give up
// waiting for the lock, or to stop CMD and exit. SIGUSR1 and SIGUSR2 are
// only passed on.
func stops(sig os.Signal) bool { return sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 }

// sigName is sig as the events name it: SIGINT, SIGTERM...
func sigName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		switch s {
		case syscall.SIGINT:
			return "SIGINT"
		case syscall.SIGTERM:
			return "SIGTERM"
		case syscall.SIGHUP:
			return "SIGHUP"
		case syscall.SIGQUIT:
			return "SIGQUIT"
		case syscall.SIGUSR1:
			return "SIGUSR1"
		case syscall.SIGUSR2:
			return "SIGUSR2"
		}
	}
	return sig.String()
}

// notifyResize relays SIGWINCH, the terminal's size changed, to c (top).
func notifyResize(c chan<- os.Signal) { signal.Notify(c, syscall.SIGWINCH) }

// runSupported reports whether run can keep its promises here: yes.
func runSupported() error { return nil }

// The guard's descriptors and the lines it writes on the status pipe.
const (
	lifelineFD   = 3         // read end of the lifeline: EOF when run is gone
	statusFD     = 4         // write end of the status pipe, read by run
	guardStarted = "started" // CMD is running
	guardExited  = "exit"    // "exit N": CMD ended with shell status N
)

// group is a running guard, leader of CMD's process group, as run sees it.
type group struct {
	cmd      *exec.Cmd
	pgid     int
	lifeline *os.File      // write end; closed only after the guard is reaped
	events   <-chan string // the status pipe's lines; closed when the guard is gone
}

// startGroup starts the guard, which starts argv with env in a new process
// group. The guard's output is stdout and stderr, which CMD inherits.
func startGroup(argv, env []string, stdout, stderr io.Writer) (*group, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the guard: %w", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{guardCommand, "--"}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{lifeR, statW} // lifelineFD, statusFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = childWaitDelay
	err = cmd.Start()
	// The guard has its copies; run keeps only lifeW and statR (both
	// close-on-exec, so no other child inherits them).
	lifeR.Close()
	statW.Close()
	if err != nil {
		lifeW.Close()
		statR.Close()
		return nil, err
	}
	events := make(chan string)
	go func() {
		defer close(events)
		defer statR.Close()
		sc := bufio.NewScanner(statR)
		for sc.Scan() {
			events <- sc.Text() // the supervising loop reads until close
		}
	}()
	return &group{cmd: cmd, pgid: cmd.Process.Pid, lifeline: lifeW, events: events}, nil
}

// signal sends sig to every process of the group.
func (g *group) signal(sig syscall.Signal) { _ = syscall.Kill(-g.pgid, sig) }

// runChild runs CMD in its process group while h (a lease, a
// leadership) lasts, passing on sigs, and returns the exit status (see
// runCmd). It returns only when the whole group has been sent SIGKILL and
// the guard is reaped.
func (c runConfig) runChild(h holding, sigs <-chan os.Signal, stdout, stderr io.Writer, r *reporter) int {
	g, err := startGroup(c.argv, c.childEnv(h), stdout, stderr)
	if err != nil {
		r.fail("%v", err)
		r.tell(false, "", eventExit, "status", exitCannotRun)
		return exitCannotRun
	}
	var (
		started  bool             // the guard said CMD runs: it has its handlers
		pending  []syscall.Signal // to send once started
		stopping bool             // the lease was lost or a stopping signal passed on
		lost     bool
		status   = -1 // CMD's status as the guard reported it
		grace    *time.Timer
		graceC   <-chan time.Time
		expired  bool // --max-hold ran out: CMD is being stopped for it
		maxHoldC <-chan time.Time
	)
	if !c.stopAt.IsZero() {
		t := time.NewTimer(time.Until(c.stopAt))
		defer t.Stop()
		maxHoldC = t.C
	}
	send := func(sig syscall.Signal) {
		if !started && sig != syscall.SIGKILL {
			pending = append(pending, sig)
			return
		}
		g.signal(sig)
	}
	// stop sends a stopping signal, and SIGCONT after it (as a shell's
	// kill does for a stopped job): a stopped process acts on it only once
	// it runs again.
	stop := func(sig syscall.Signal) {
		send(sig)
		send(syscall.SIGCONT)
	}
	startGrace := func() {
		if grace == nil {
			grace = time.NewTimer(c.grace)
			graceC = grace.C
		}
	}
	leaseDone := h.Done()
	for events := g.events; events != nil; {
		select {
		case line, ok := <-events:
			switch {
			case !ok:
				events = nil
			case line == guardStarted:
				started = true
				r.tell(false, "", eventStarted, "command", c.argv)
				for _, s := range pending {
					g.signal(s)
				}
				pending = nil
			case strings.HasPrefix(line, guardExited+" "):
				if n, err := strconv.Atoi(strings.TrimPrefix(line, guardExited+" ")); err == nil {
					status = n
				}
			}
		case <-maxHoldC:
			// Stopped before the lock's own max hold ends (maxHoldLock):
			// the lock is released only once the group is gone.
			maxHoldC, expired = nil, true
			if !stopping {
				stopping = true
				r.tell(false, fmt.Sprintf("the max hold (--max-hold %v) ran out; stopping %s (SIGTERM to its process group, SIGKILL after %v)", c.maxHold, c.argv[0], c.grace),
					eventMaxHold, "max_hold_ms", c.maxHold.Milliseconds())
				stop(syscall.SIGTERM)
				startGrace()
			}
		case <-leaseDone:
			if expired {
				// The lease ended while CMD was being stopped for --max-hold
				// (run was slow, say): the lock may be free soon; CMD must
				// not run on beside another holder.
				leaseDone, lost = nil, true
				r.tell(false, fmt.Sprintf("%v while %s was being stopped: SIGKILL to its process group", h.Err(), c.argv[0]),
					eventLost, "error", errText(h.Err()))
				send(syscall.SIGKILL)
				break
			}
			leaseDone, lost, stopping = nil, true, true
			r.tell(false, fmt.Sprintf("%v; stopping %s (SIGTERM to its process group, SIGKILL after %v)", h.Err(), c.argv[0], c.grace),
				eventLost, "error", errText(h.Err()))
			stop(syscall.SIGTERM)
			startGrace()
		case s := <-sigs:
			sig, _ := s.(syscall.Signal)
			switch {
			case !stops(s):
				send(sig)
			case stopping:
				r.tell(false, fmt.Sprintf("%v: killing %s's process group", s, c.argv[0]), eventSignal, "signal", sigName(s))
				send(syscall.SIGKILL)
			default:
				stopping = true
				r.tell(false, fmt.Sprintf("%v: passing it on to %s's process group (SIGKILL after %v)", s, c.argv[0], c.grace), eventSignal, "signal", sigName(s))
				stop(sig)
				startGrace()
			}
		case <-graceC:
			graceC = nil
			r.fail("%s still runs after %v: SIGKILL to its process group", c.argv[0], c.grace)
			send(syscall.SIGKILL)
		}
	}
	if grace != nil {
		grace.Stop()
	}
	// The guard is gone: it killed the group, or was killed before it could.
	// It is not reaped yet, so the pgid is still this group's.
	g.signal(syscall.SIGKILL)
	werr := g.cmd.Wait()
	g.lifeline.Close()

	code := status
	if code < 0 {
		code = exitStatus(g.cmd, werr)
	}
	r.tell(false, "", eventExit, "status", code)
	if lerr := h.Err(); lerr != nil && !errors.Is(lerr, dlock.ErrUnlocked) {
		if !lost {
			r.tell(false, fmt.Sprintf("the lease ended while %s ran: %v", c.argv[0], lerr), eventLost, "error", errText(lerr))
		}
		// whatever CMD's status: the lock was not held throughout
		r.fail("%s exited with status %d; the lease was lost: exit status %d (--lost-exit-code)", c.argv[0], code, c.lostCode)
		code = c.lostCode
	} else if expired {
		r.fail("%s exited with status %d after the max hold (--max-hold %v) ran out: exit status %d (--lost-exit-code)", c.argv[0], code, c.maxHold, c.lostCode)
		code = c.lostCode
	}
	return code
}

// exitStatus is the shell's view of how a child ended: its exit code, or
// 128+n if signal n killed it.
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
