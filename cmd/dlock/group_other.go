//go:build !unix

package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
)

// guardCommand is the hidden command that run starts on Unix systems.
const guardCommand = "run-guard"

// groupSignals are the signals run catches here.
var groupSignals = []os.Signal{os.Interrupt}

// stops reports whether sig asks run to stop: every signal does here.
func stops(os.Signal) bool { return true }

// runSupported refuses: without process groups run cannot make sure that
// nothing the command started outlives the lock.
func runSupported() error {
	return fmt.Errorf("dlock run needs Unix process groups, which %s does not have", runtime.GOOS)
}

// notifyResize does nothing: no SIGWINCH here; top fits each frame to
// the size it reads before drawing it.
func notifyResize(chan<- os.Signal) {}

// sigName is sig as run's events name it.
func sigName(sig os.Signal) string { return sig.String() }

// runChild is never called where runSupported refuses.
func (c runConfig) runChild(holding, <-chan os.Signal, io.Writer, io.Writer, *reporter) int {
	return exitFail
}

// guardCmd refuses: the guard exists on Unix only.
func guardCmd(_ []string, _, stderr io.Writer) int {
	complain(stderr, "%s: Unix only", guardCommand)
	return exitUsage
}
