//go:build !linux

package redistest

import "os/exec"

// setDeathSignal is a no-op where the platform has no parent-death signal;
// there servers are only cleaned up by Close.
func setDeathSignal(*exec.Cmd) {}
