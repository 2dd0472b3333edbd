//go:build unix

package redistest

import "syscall"

// stop freezes the process with SIGSTOP.
func (p *proc) stop() error { return p.signal(syscall.SIGSTOP) }

// cont resumes a stopped process with SIGCONT.
func (p *proc) cont() error { return p.signal(syscall.SIGCONT) }
