// Package fence is what the guards of protected stores share: the token a
// fenced write carries, and the error of a write that came too late.
//
// A lock's fence grows with every owner (dlock's fencing tokens). A guard
// (package redisfence, for Redis) keeps, per resource, the highest fence it
// has accepted, and accepts a write only with a fence at least that high,
// atomically with the write. So a holder that was paused past its lease —
// a GC pause, a stopped VM — and resumes to write after a newer owner
// wrote is refused with ErrStale instead of overwriting newer data: the
// store checks the fence, not the holder's belief that it still holds the
// lock.
//
// What a guard does not do: protect writes that bypass it (write a fenced
// resource through its guard only), order writes of one holder among
// themselves (an equal fence is accepted: the same holder may write many
// times), or tell a holder whether its lease is still valid before the
// write (Lease.Err and Lease.Done do that).
package fence

import (
	"errors"
	"reflect"
)

// Token is what a fenced write carries: *dlock.Lease satisfies it, and so
// does *dlock.Leadership (its fence is its term).
type Token interface{ Fence() int64 }

// ErrStale is what a guard's write returns (wrapped, with the fences) when
// the resource has already accepted a higher fence: nothing was written.
var ErrStale = errors.New("fence: stale: the resource has accepted a higher fence")

// ErrInvalid is what a guard returns for bad input (a nil token, a fence
// below 1, an empty resource or key): nothing was written.
var ErrInvalid = errors.New("fence: invalid argument")

// Check returns t's fence, or an error matching ErrInvalid for a nil
// token or a fence below 1 (no dlock lock hands those out) and an empty
// resource.
func Check(t Token, resource string) (int64, error) {
	if t == nil {
		return 0, errors.Join(ErrInvalid, errors.New("fence: nil token"))
	}
	if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
		return 0, errors.Join(ErrInvalid, errors.New("fence: nil token"))
	}
	f := t.Fence()
	if f < 1 {
		return 0, errors.Join(ErrInvalid, errors.New("fence: a fence below 1 is no lock's"))
	}
	if resource == "" {
		return 0, errors.Join(ErrInvalid, errors.New("fence: empty resource"))
	}
	return f, nil
}
