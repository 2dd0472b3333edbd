package dlock

import (
	"context"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/hold"
	"go.opentelemetry.io/otel/codes"
)

// Lease is the proof that a lock is held, returned by a successful
// acquire. It stays valid until Unlock, or until it is lost: the lock
// expired, was taken over, or its renewal could not be confirmed in time.
// Done and Err say which.
//
// A Lease is safe for concurrent use: any goroutine may watch Done, read
// Err, or call Unlock (only the first Unlock releases).
type Lease struct {
	of  held      // what it holds: one hold, or a set's parts
	end *hold.End // when it ended and why, and who to tell (a hold's first lease's lives in the hold)
}

// Name is the name of the lock the lease holds; for a set (LockAll), the
// names of its locks, in locking order, joined by ", ".
func (l *Lease) Name() string { return l.of.Name() }

// Token is the random 128-bit owner token under which the lease holds the
// lock in Redis (hex). Leases taken by re-entry share their outer lease's
// token. A set's (LockAll) token is that of its first lock; Parts gives
// the others.
func (l *Lease) Token() string { return l.of.First().Token() }

// Fence is the lease's fencing token: it increases strictly with each
// owner that acquires the lock's name, and never goes back (its counter in
// Redis does not expire). Pass it to the resource the lock protects and
// have the resource refuse a fence lower than one it has seen: that stops
// a holder that lost its lease without knowing it (paused, partitioned)
// from acting as owner. Re-entry returns the outer lease's fence. A set's
// fence is that of its first lock: fences of different locks do not
// compare, so pass each resource the fence of its own lock (see Parts).
func (l *Lease) Fence() int64 { return l.of.First().Fence() }

// Done returns a channel that is closed when the lease ends: after Unlock,
// or as soon as the lease may have been lost. When it is closed, Err says
// why.
func (l *Lease) Done() <-chan struct{} { return l.end.Done() }

// Err returns nil while the lease is held. After it ends it returns an
// error matching ErrUnlocked (Unlock), ErrLeaseLost (lost or expired) or
// ErrClosed (the Client was closed). Err checks the lease's local deadline
// itself, so it never reports nil once the deadline has passed, even before
// the watchdog has run.
func (l *Lease) Err() error {
	// What it holds may have ended a moment ago and be telling its leases
	// still (outside its own lock: their callbacks may run user code); this
	// lease learns it now, so that Err is never nil after the end.
	if err := l.of.Check(); err != nil {
		l.end.Finish(err)
	}
	return l.end.Err()
}

// leaseKey is how a context carries a lease for re-entry: one key per
// Client, lock and side (read or write), so locks nested in one another do
// not hide each other.
type leaseKey struct {
	c    *hold.Keeper // its Client's
	lock string
	side side
}

// Context returns a context derived from parent that is cancelled when
// the lease ends (context.Cause then gives the lease's Err), and that
// carries the lease: a Lock of the same lock from the same Client, given
// this context or one derived from it, re-enters the hold instead of
// waiting. Code that should only run while the lock is held runs under
// this context.
func (l *Lease) Context(parent context.Context) context.Context {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancelCause(parent)
	forget := l.end.WhenDone(cancel)
	context.AfterFunc(ctx, forget) // once the context ends on its own
	return l.carry(ctx)
}

// carry returns ctx carrying the lease, or a set's parts, for re-entry.
func (l *Lease) carry(ctx context.Context) context.Context {
	if s, ok := l.of.(*set); ok {
		for _, p := range s.leases {
			ctx = p.carry(ctx)
		}
		return ctx
	}
	h := l.of.First()
	return context.WithValue(holding(ctx, l), leaseKey{h.Keeper(), h.Keys().Lock, side(h.Side())}, l)
}

// carrying marks a context that carries a lease, of any lock: a Lock
// whose ctx carries none (the common case) looks no further, without
// making a leaseKey (which, boxed, costs an allocation). Its value is
// the list of the leases the context carries (*carried), which a wait's
// deadlock record names (deadlock_detect.go).
type carrying struct{}

// carried is one lease a context carries, and the ones it carried before.
type carried struct {
	l    *Lease
	next *carried
}

// holding returns ctx with l added to the leases it is known to hold
// while it waits, without carrying it for re-entry (a LockAll's parts
// taken so far): what deadlock detection reads.
func holding(ctx context.Context, l *Lease) context.Context {
	prev, _ := ctx.Value(carrying{}).(*carried)
	return context.WithValue(ctx, carrying{}, &carried{l: l, next: prev})
}

// Unlock releases the lease. When it was the last lease of its hold (no
// re-entered lease is still held) the lock becomes free and one waiter is
// woken. Unlock blocks for one round trip to Redis, bounded by ctx.
//
// Whatever it returns, the lease has ended when Unlock returns (Err
// matches ErrUnlocked, Done is closed) and is no longer renewed. When the
// release itself fails (ctx ended, Redis unreachable), Unlock returns the
// Redis error, wrapped, and the Client retries the release in the
// background until Redis answers or the lease's TTL has passed (the lock
// has expired by itself then), and once more, bounded, at Close. So a
// dropped error (defer lease.Unlock(ctx)) never pins the lock.
//
// It returns an error matching ErrNotHeld when the lease had already ended:
// unlocked before (the error also matches ErrUnlocked), or lost (it matches
// ErrLeaseLost; the lock is then released if this owner still has it).
func (l *Lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	h := l.of.First()
	tel := h.Keeper().Tel()
	ctx, span := tel.SpanOn(ctx, "dlock.Unlock", h.What(), h.Keys().Name)
	err := l.of.Unlock(ctx, l.end)
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// Extend sets the lease's time to live to d from now, as one round trip;
// a lease renewed by the watchdog keeps d as its TTL from then on. It
// returns an error matching ErrNotHeld when the lease has ended or the
// lock is no longer this owner's (the lease is then lost), ErrInvalidArgument
// when d is below 1 ms, and a wrapped Redis error otherwise.
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if d < minTTL {
		return invalid("lease TTL %v is below 1ms", d)
	}
	return l.of.Extend(ctx, l.end, d)
}

// TTL returns how long the lock has left before it expires, as the server
// sees it. It returns an error matching ErrNotHeld when the lease has
// ended or the lock is no longer this owner's (the lease is then lost).
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, invalid("nil context")
	}
	return l.of.TTLLeft(ctx, l.end)
}

// Parts returns the leases of a set's locks in locking order (the order
// of their keys), or the lease itself for a single lock.
func (l *Lease) Parts() []*Lease {
	if s, ok := l.of.(*set); ok {
		return slices.Clone(s.leases)
	}
	return []*Lease{l}
}

// held is what a Lease holds: one hold of one lock (*hold.Hold), or the
// parts of a LockAll set (*set, set.go). The Lease keeps what both share
// (its End): when it ended and why, and who to tell; they know the lease
// by it.
type held interface {
	Name() string
	First() *hold.Hold // the hold whose token and fence the lease shows
	Check() error      // for Err: end what has ended without a signal yet, and say why it ended (nil: held)
	Unlock(ctx context.Context, e *hold.End) error
	Extend(ctx context.Context, e *hold.End, d time.Duration) error
	TTLLeft(ctx context.Context, e *hold.End) (time.Duration, error)
}
