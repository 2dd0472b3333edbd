//go:build !linux

package main

import "os/exec"

// setProcAttr does nothing where the kernel cannot tie a child's life to
// its parent's: the demo still stops its children on every exit path it
// controls, and run's guard is told by its lifeline pipe.
func setProcAttr(cmd *exec.Cmd, ownGroup bool) {}
