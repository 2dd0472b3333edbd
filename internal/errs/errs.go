// Package errs holds the values of dlock's sentinel errors, which the
// root package exports (dlock.ErrNotObtained is errs.NotObtained), so that
// the internal packages can return them without importing the root; and
// the helpers that wrap them.
package errs

import (
	"errors"
	"fmt"
	"strings"
)

// The sentinel errors; their documentation is the root's (errors.go).
var (
	NotObtained     = errors.New("dlock: lock not obtained")                   // dlock.ErrNotObtained
	Deadlock        = errors.New("dlock: deadlock")                            // dlock.ErrDeadlock
	NotHeld         = errors.New("dlock: lock not held")                       // dlock.ErrNotHeld
	LeaseLost       = errors.New("dlock: lease lost")                          // dlock.ErrLeaseLost
	Unlocked        = errors.New("dlock: lease unlocked")                      // dlock.ErrUnlocked
	Closed          = errors.New("dlock: client closed")                       // dlock.ErrClosed
	ReplicaSync     = errors.New("dlock: not acknowledged by enough replicas") // dlock.ErrReplicaSync
	EvictionPolicy  = errors.New("dlock: the server may evict lock keys")      // dlock.ErrEvictionPolicy
	PubSubRefused   = errors.New("dlock: pub/sub refused by the server")       // dlock.ErrPubSubRefused
	InvalidArgument = errors.New("dlock: invalid argument")                    // dlock.ErrInvalidArgument
	NoLeader        = errors.New("dlock: no leader")                           // dlock.ErrNoLeader

	UnsupportedServer = errors.New("dlock: server version not supported") // dlock.ErrUnsupportedServer
)

// Invalid returns an error wrapping InvalidArgument with a description.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", InvalidArgument, fmt.Sprintf(format, args...))
}

// Redis wraps an error from Redis with what dlock was doing (op) on the
// lock called name.
// A WRONGTYPE says that the lock's key holds another layout than its
// scripts read: a Client of a dlock from before the one-string mutex hold
// (internal/protocol/scripts/lib_mutex.lua) holds it, during a rolling
// deploy, or another kind of lock was made under the same name and
// prefix. Its error is named, so that an operator is not left with Redis's
// words alone.
func Redis(op, name string, err error) error {
	if strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("dlock: %s %q: its key holds another layout: a Client of an older dlock "+
			"(before v0.2's one-string hold: see docs/how-it-works.md) or another kind of lock under this name: %w", op, name, err)
	}
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}

// WaitEnded is the error of a wait cut short by its context: it matches
// NotObtained and the context's error.
func WaitEnded(name string, ctxErr error) error {
	return fmt.Errorf("%w: %q: %w", NotObtained, name, ctxErr)
}

// Late is the error of a call whose ctx ended before its reply came: the
// command may still run on the server until Done closes (its reply came,
// to nobody, or its connection died). It matches Err, ctx.Err().
type Late struct {
	Err  error
	Done <-chan struct{}
}

func (e *Late) Error() string { return e.Err.Error() }
func (e *Late) Unwrap() error { return e.Err }
