//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Environment variables that make TestMain run this test binary as
// something else than the tests.
const (
	// cliEnv set to "1": the binary is dlock itself (run(os.Args[1:])).
	cliEnv = "DLOCK_TEST_CLI"
	// helperEnv names a helper program (helperMain) to run.
	helperEnv = "DLOCK_TEST_HELPER"
)

// Helper programs, the values of helperEnv.
const (
	// helperFamily starts a helperMember child and then behaves as a
	// member itself, waiting for the child before it exits: a command with
	// a grandchild, both reporting the signals they get.
	helperFamily = "family"
	// helperMember appends "ready PID PGID" to the log file named by its
	// argument, then "PID SIGNAL" for every signal of groupSignals it gets;
	// after a stopping one it exits with helperStatus.
	helperMember = "member"
	// helperStatus is the exit status of a member stopped by a signal, so
	// that the tests can tell that run passed on its child's status.
	helperStatus = 42
)

// helperMain runs the helper program mode with args and returns its exit
// status.
func helperMain(mode string, args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "helper: want one argument, the log file")
		return 2
	}
	logPath := args[0]
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, groupSignals...)
	var child *exec.Cmd
	if mode == helperFamily {
		child = exec.Command(os.Args[0], logPath)
		child.Env = append(os.Environ(), helperEnv+"="+helperMember)
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
	}
	logLine := func(format string, a ...any) {
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		fmt.Fprintf(f, format+"\n", a...)
		f.Close()
	}
	logLine("ready %d %d", os.Getpid(), syscall.Getpgrp())
	for s := range sigs {
		logLine("%d %s", os.Getpid(), signalName(s))
		if stops(s) {
			if child != nil {
				_ = child.Wait()
			}
			return helperStatus
		}
	}
	return 1 // not reached
}

// signalName is the short name of sig as the helpers log it.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGQUIT:
		return "QUIT"
	case syscall.SIGUSR1:
		return "USR1"
	case syscall.SIGUSR2:
		return "USR2"
	}
	return sig.String()
}
