package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// set is what the lease of a LockAll set holds: the leases of its locks,
// in locking order. The set's lease ends as soon as any part ends.
type set struct {
	leases []*Lease
}

// newSet returns the lease of a set of parts.
func newSet(parts []*Lease) *Lease {
	l := &Lease{of: &set{leases: parts}}
	for _, p := range parts {
		p.whenDone(l.finish)
	}
	return l
}

func (s *set) name() string {
	names := make([]string, len(s.leases))
	for i, p := range s.leases {
		names[i] = p.Name()
	}
	return strings.Join(names, ", ")
}

// first is the hold of the first part: a set's token and fence are its.
func (s *set) first() *hold { return s.leases[0].of.first() }

// check looks at every part (each checks its own deadline) and returns
// the first part's end it finds: a part that has ended ends the set
// through whenDone, which may not have run yet.
func (s *set) check() error {
	for _, p := range s.leases {
		if err := p.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *set) carry(ctx context.Context, _ *Lease) context.Context {
	for _, p := range s.leases {
		ctx = p.carry(ctx)
	}
	return ctx
}

func (s *set) parts(*Lease) []*Lease { return slices.Clone(s.leases) }

// unlock releases every lock of the set, the last taken first.
func (s *set) unlock(ctx context.Context, l *Lease) error {
	prior := l.Err()
	var errs []error
	for i := len(s.leases) - 1; i >= 0; i-- {
		err := s.leases[i].Unlock(ctx)
		if err != nil && !(prior != nil && errors.Is(err, ErrNotHeld)) {
			errs = append(errs, err)
		}
	}
	l.finish(ErrUnlocked)
	if prior != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, prior)
	}
	return errors.Join(errs...)
}

// extend extends every lock of the set.
func (s *set) extend(ctx context.Context, _ *Lease, d time.Duration) error {
	var errs []error
	for _, p := range s.leases {
		errs = append(errs, p.Extend(ctx, d))
	}
	return errors.Join(errs...)
}

// ttlLeft is the least TTL left of the set's locks.
func (s *set) ttlLeft(ctx context.Context, _ *Lease) (time.Duration, error) {
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
