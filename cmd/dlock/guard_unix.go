//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// guardCommand is the hidden command that run starts as the leader of its
// command's process group (see group_unix.go).
const guardCommand = "run-guard"

// guardSynopsis is the guard's usage line; users do not call it.
const guardSynopsis = "dlock " + guardCommand + " -- CMD [ARGS...] (internal: started by dlock run)"

// guardCmd is the hidden "run-guard" command. Started by run as a process
// group leader with the lifeline's read end on fd 3 and the status pipe's
// write end on fd 4, it starts CMD in its group, writes "started" on the
// status pipe, and when CMD exits writes "exit N" (N the shell's status of
// CMD) and sends SIGKILL to its whole group, itself included. If the
// lifeline reads EOF first — run is gone — it sends that SIGKILL at once.
// It refuses to run unless it leads its process group and fds 3 and 4 are
// pipes, so that a stray call cannot kill someone else's group.
//
// CMD gets the guard's own descriptors 0, 1 and 2 (never a copying pipe:
// the guard must not wait for output that a straggler keeps open before it
// kills the straggler). On Linux CMD also gets Pdeathsig SIGKILL: if the
// guard is killed, CMD dies with it (run then kills the rest of the
// group). Pdeathsig fires when the thread that forked exits, not the
// process, so the guard's main goroutine locks its OS thread before
// starting CMD and never unlocks it: that thread lives as long as the
// guard.
func guardCmd(args []string, _, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "--" {
		return usageError(stderr, guardSynopsis, "want -- CMD [ARGS...]")
	}
	if syscall.Getpgrp() != os.Getpid() {
		complain(stderr, "%s: not a process group leader; this command is started by dlock run", guardCommand)
		return exitUsage
	}
	for _, fd := range []int{lifelineFD, statusFD} {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			complain(stderr, "%s: fd %d is not a pipe; this command is started by dlock run", guardCommand, fd)
			return exitUsage
		}
		syscall.CloseOnExec(fd) // CMD must not hold them
	}
	lifeline := os.NewFile(lifelineFD, "lifeline")
	status := os.NewFile(statusFD, "status")

	// Caught, never read: the guard survives what run passes on to the
	// group, and CMD starts with these signals at their defaults.
	signal.Notify(make(chan os.Signal, 1), groupSignals...)
	go func() {
		_, _ = io.Copy(io.Discard, lifeline) // returns when run is gone
		killOwnGroup()
	}()

	runtime.LockOSThread() // never unlocked: Pdeathsig follows this thread
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	setProcAttr(cmd, false)
	code := exitOK
	if err := cmd.Start(); err != nil {
		complain(stderr, "%v", err)
		code = startErrorStatus(err)
	} else {
		fmt.Fprintln(status, guardStarted)
		code = exitStatus(cmd, cmd.Wait())
	}
	fmt.Fprintf(status, "%s %d\n", guardExited, code)
	killOwnGroup()
	return code // not reached
}

// killOwnGroup sends SIGKILL to every process of the caller's process
// group, the caller included.
func killOwnGroup() { _ = syscall.Kill(0, syscall.SIGKILL) }
