package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/hold"
)

// set is what the lease of a LockAll set holds: the leases of its locks,
// in locking order. The set's lease ends as soon as any part ends.
type set struct {
	leases []*Lease
	end    hold.End // the set's lease's
}

// newSet returns the lease of a set of parts.
func newSet(parts []*Lease) *Lease {
	s := &set{leases: parts}
	l := &Lease{of: s, end: &s.end}
	for _, p := range parts {
		p.end.WhenDone(l.end.Finish)
	}
	return l
}

func (s *set) Name() string {
	names := make([]string, len(s.leases))
	for i, p := range s.leases {
		names[i] = p.Name()
	}
	return strings.Join(names, ", ")
}

// First is the hold of the first part: a set's token and fence are its.
func (s *set) First() *hold.Hold { return s.leases[0].of.First() }

// Check looks at every part (each checks its own deadline) and returns
// the first part's end it finds: a part that has ended ends the set
// through whenDone, which may not have run yet.
func (s *set) Check() error {
	for _, p := range s.leases {
		if err := p.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Unlock releases every lock of the set, the last taken first; e is the
// set's lease's End.
func (s *set) Unlock(ctx context.Context, e *hold.End) error {
	if err := s.Check(); err != nil {
		e.Finish(err)
	}
	prior := e.Err()
	var errs []error
	for i := len(s.leases) - 1; i >= 0; i-- {
		err := s.leases[i].Unlock(ctx)
		if err != nil && !(prior != nil && errors.Is(err, ErrNotHeld)) {
			errs = append(errs, err)
		}
	}
	e.Finish(ErrUnlocked)
	if prior != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, prior)
	}
	return errors.Join(errs...)
}

// Extend extends every lock of the set.
func (s *set) Extend(ctx context.Context, _ *hold.End, d time.Duration) error {
	var errs []error
	for _, p := range s.leases {
		errs = append(errs, p.Extend(ctx, d))
	}
	return errors.Join(errs...)
}

// TTLLeft is the least TTL left of the set's locks.
func (s *set) TTLLeft(ctx context.Context, _ *hold.End) (time.Duration, error) {
	least := time.Duration(-1)
	for _, p := range s.leases {
		d, err := p.TTL(ctx)
		if err != nil {
			return 0, err
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least, nil
}
