//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttr ties a child to the demo: the kernel sends it SIGKILL when
// the thread that started it goes away, so a crashed or killed demo leaves
// no server or worker behind. With ownGroup the child gets a process group
// of its own and so does not receive the terminal's Ctrl-C: the demo stops
// it, in order, when it is done.
func setProcAttr(cmd *exec.Cmd, ownGroup bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: ownGroup}
}
