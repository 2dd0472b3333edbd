//go:build !unix

package redistest

import "errors"

// stop is not supported without POSIX job-control signals.
func (p *proc) stop() error { return errors.ErrUnsupported }

// cont is not supported without POSIX job-control signals.
func (p *proc) cont() error { return errors.ErrUnsupported }
