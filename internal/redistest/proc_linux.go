//go:build linux

package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel SIGKILL the child when the thread that
// started it goes away, so servers never outlive a crashed test binary.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
