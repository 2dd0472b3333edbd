//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttr ties a child to its parent: the kernel sends it SIGKILL when
// the thread that started it goes away, so a crashed or killed demo leaves
// no server or worker behind, and a killed run guard no command. (Go ends
// a thread only when a goroutine locked to it exits: the caller either
// never locks the starting goroutine, or keeps it locked for good.) With
// ownGroup the child gets a process group of its own and so does not
// receive the terminal's Ctrl-C: the demo stops it, in order, when it is
// done.
func setProcAttr(cmd *exec.Cmd, ownGroup bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: ownGroup}
}
