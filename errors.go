package dlock

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
)

// Sentinel errors. Check them with errors.Is: the errors that dlock returns
// wrap them with detail (the lock's name, the Redis error behind them).
var (
	// ErrNotObtained means the lock is held by another owner: a TryLock
	// found it taken, or a Lock's wait ended (its context was cancelled or
	// timed out) before the lock came free. An error from a wait that ended
	// with its context also matches ctx.Err() under errors.Is. Such an
	// error is a *BusyError (errors.As), which says who holds the lock.
	ErrNotObtained = errs.NotObtained

	// ErrNotHeld means the caller does not hold the lock it tried to
	// release, extend or inspect: the lease was already unlocked, or lost.
	ErrNotHeld = errs.NotHeld

	// ErrLeaseLost is a lease's Err once it may have ended without an
	// Unlock: a renewal found the key gone or owned by another, no renewal
	// was confirmed before the lease's local deadline, or a fixed lease ran
	// out. Another owner may hold the lock from that moment on.
	ErrLeaseLost = errs.LeaseLost

	// ErrUnlocked is a lease's Err after its Unlock succeeded.
	ErrUnlocked = errs.Unlocked

	// ErrClosed is returned by calls on a closed Client, and is the Err of
	// leases that were still held when their Client was closed.
	ErrClosed = errs.Closed

	// ErrReplicaSync means fewer replicas than WithReplicaSync asks for
	// acknowledged a grant in time. An acquire that fails with it has been
	// released.
	ErrReplicaSync = errs.ReplicaSync

	// ErrEvictionPolicy is returned by a Client's first Lock or TryLock
	// when a server's maxmemory-policy may evict keys (anything but
	// noeviction): an evicted lock lets a second owner in, an evicted fence
	// counter issues the same fences again. Set maxmemory-policy
	// noeviction, or accept the risk with WithEvictionRisk.
	ErrEvictionPolicy = errs.EvictionPolicy

	// ErrUnsupportedServer is returned by a Client's first Lock or TryLock
	// (where ErrEvictionPolicy is) when a server is older than the oldest
	// dlock supports, Redis 6.0 (every Valkey is supported), or, on a
	// cluster with sharded pub/sub (the default there), older than Redis
	// 7.0. The error names the server's version and the oldest supported;
	// nothing has been written. docs/deployments.md, "Supported servers".
	ErrUnsupportedServer = errs.UnsupportedServer

	// ErrPubSubRefused is matched by Client.Health's error once the server
	// refused the Client's PUBLISH or SUBSCRIBE (an ACL user without the
	// channels &<prefix>:*): releases wake nobody, and waits poll.
	ErrPubSubRefused = errs.PubSubRefused

	// ErrInvalidArgument is wrapped by every error about bad input: an
	// empty lock name, a TTL out of range, a nil context or client.
	ErrInvalidArgument = errs.InvalidArgument

	// ErrNoLeader is returned by Election.Leader when nobody leads the
	// election.
	ErrNoLeader = errs.NoLeader
)

// BusyError is the error of an acquire refused because another owner
// holds the lock: a TryLock (TryRLock, TryAcquire) that found it held, or
// a Lock (RLock, Acquire, Campaign, LockAll) whose ctx ended while it
// waited. errors.Is(err, ErrNotObtained) holds for it, and, for a wait
// cut short, errors.Is(err, ctx.Err()) as well; errors.As(err, &be) with
// a be of type *BusyError gives who held the lock.
//
// Holder is read once the acquire has been refused (no read is made on
// the uncontended path nor while a Lock waits): for a TryLock just after
// its refusal, within its ctx; for a Lock whose ctx ended, after that end,
// within a short grace (10 ms) — so a holder that the server changed in
// between may be named, and when the server does not answer in time
// Holder is nil (and Owner may be nil when the Client's owner record
// could not be read, or was never written: WithoutOwnerRecord). Holder is
// nil too when nobody held the lock by then (it was freed, or kept for a
// waiter ahead in the queue) and on a quorum Client (NewQuorum), whose
// nodes are not inspected. A Client WithoutScripts names the holder's
// token and TTL: its plain lock keeps no fence, since or label, and it
// writes no owner record (a script) for Owner.
type BusyError struct {
	Kind Kind   // the kind of lock
	Name string // the lock refused (for a LockAll, the part that was held)
	// Holder is the holder that refused the acquire: for an RWMutex's
	// writer refused by readers, the first of them (Holders has them
	// all); for a Semaphore, the holder that has held longest.
	Holder *Holder
	// Holders are all the lock's holders as read (the caller's own, a
	// read inside its write hold, left out), first taken first.
	Holders []Holder
	err     error
}

// Error says what the acquire's error says, and who holds the lock.
func (e *BusyError) Error() string {
	if e.Holder == nil {
		return e.err.Error()
	}
	var b strings.Builder
	b.WriteString(e.err.Error())
	b.WriteString(" (held by ")
	describeHolder(&b, e.Holder)
	if n := len(e.Holders) - 1; n > 0 {
		fmt.Fprintf(&b, ", and %d more", n)
	}
	b.WriteString(")")
	return b.String()
}

// describeHolder writes a holder's label, owner and fence, concisely.
func describeHolder(b *strings.Builder, h *Holder) {
	sep := ""
	if h.Label != "" {
		b.WriteString(strconv.Quote(h.Label))
		sep = " "
	}
	if o := h.Owner; o != nil {
		b.WriteString(sep)
		fmt.Fprintf(b, "%s pid %d", o.Host, o.PID)
		if o.Program != "" {
			b.WriteString(" " + o.Program)
		}
		if o.Label != "" {
			b.WriteString(" [" + o.Label + "]")
		}
		sep = " "
	}
	if h.Fence != 0 {
		fmt.Fprintf(b, "%sfence %d", sep, h.Fence)
		sep = " "
	}
	if sep == "" {
		b.WriteString("token " + h.Token)
	}
}

// Unwrap returns the acquire's error: it matches ErrNotObtained, and a
// wait's ctx error when the wait was cut short.
func (e *BusyError) Unwrap() error { return e.err }

// Is reports whether target is ErrNotObtained.
func (e *BusyError) Is(target error) bool { return target == ErrNotObtained }

// invalid returns an error wrapping ErrInvalidArgument with a description.
func invalid(format string, args ...any) error { return errs.Invalid(format, args...) }

// waitEnded is the error of a wait cut short by its context: it matches
// ErrNotObtained and the context's error.
func waitEnded(name string, ctxErr error) error { return errs.WaitEnded(name, ctxErr) }

// redisErr wraps an error from Redis with what dlock was doing.
func redisErr(op, name string, err error) error { return errs.Redis(op, name, err) }
