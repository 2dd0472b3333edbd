package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// hold is one owner's possession of a lock in Redis: a token with a hold
// count. Re-entry adds leases to the same hold; the hold ends when its last
// lease is unlocked, or for all of its leases at once when it is lost.
type hold struct {
	c     *Client
	k     keys
	p     protocol
	side  string // "" for a mutex; "r" or "w" for an RWMutex's read or write hold
	token string
	fence int64
	renew bool // the watchdog renews it

	// op serialises the calls that set the hold count in Redis (re-entry
	// and unlock), so that the count they send is the one they read.
	op sync.Mutex

	mu        sync.Mutex
	count     int           // holds in Redis (under op for writes)
	ttl       time.Duration // lease length used by renewals
	deadline  time.Time     // local: the lease may be gone after this
	nextRenew time.Time     // when the watchdog renews it next
	renewing  bool          // a renewal of it is in flight
	// Its places in the watchdog's schedules (guarded by the watchdog's mu).
	deadlineAt, renewAt slot
	releasing           bool // its final Unlock is in flight: a renewal that finds it gone is not a loss
	epoch               int  // bumped by Extend: older renewals confirm nothing
	leases              map[*Lease]struct{}
	err                 error // why the hold ended; nil while held
}

func newHold(c *Client, k keys, p protocol, token string, fence int64, cfg lockConfig, start time.Time) *hold {
	h := &hold{c: c, k: k, p: p, token: token, fence: fence, renew: cfg.renew, count: 1,
		ttl: cfg.ttl, leases: make(map[*Lease]struct{}), deadlineAt: slot{index: -1}, renewAt: slot{index: -1}}
	h.confirmed(start, cfg.ttl)
	return h
}

// confirmed records that a request sent at start set the lease to ttl: the
// server will not expire it before start+ttl, and the local deadline keeps
// a drift margin below that. Call with h.mu held, or before h is shared.
func (h *hold) confirmed(start time.Time, ttl time.Duration) {
	if d := start.Add(ttl - h.c.drift.of(ttl)); d.After(h.deadline) {
		h.deadline = d
	}
	h.nextRenew = start.Add(ttl / 3)
}

// newLease adds a lease to the hold. It fails when the hold has ended.
func (h *hold) newLease() (*Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, h.err
	}
	l := &Lease{h: h, done: make(chan struct{})}
	h.leases[l] = struct{}{}
	return l, nil
}

// end ends the hold and every lease still on it with err. Only the first
// call has an effect.
func (h *hold) end(err error) {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = err
	leases := h.leases
	h.leases = nil
	h.mu.Unlock()
	for l := range leases {
		l.finish(err)
	}
	h.c.wd.remove(h)
}

// expireIfLate ends the hold as lost when its local deadline has passed,
// whether or not the watchdog has woken up yet to notice.
func (h *hold) expireIfLate(now time.Time) {
	h.mu.Lock()
	late := h.err == nil && !now.Before(h.deadline)
	h.mu.Unlock()
	if late {
		why := "no renewal confirmed before its deadline"
		if !h.renew {
			why = "its fixed lease ran out"
		}
		h.end(lost(h.k.name, why))
	}
}

func lost(name, why string) error {
	return fmt.Errorf("%w: %q: %s", ErrLeaseLost, name, why)
}

// Lease is the proof that a lock is held, returned by a successful
// acquire. It stays valid until Unlock, or until it is lost: the lock
// expired, was taken over, or its renewal could not be confirmed in time.
// Done and Err say which.
//
// A Lease is safe for concurrent use: any goroutine may watch Done, read
// Err, or call Unlock (only the first Unlock releases).
type Lease struct {
	h     *hold    // nil for the lease of a set (LockAll)
	parts []*Lease // a set's leases, in locking order
	done  chan struct{}

	mu    sync.Mutex
	err   error
	onEnd map[*int]func(error) // run when the lease ends: contexts, sets
}

// Name is the name of the lock the lease holds; for a set (LockAll), the
// names of its locks, in locking order, joined by ", ".
func (l *Lease) Name() string {
	if l.h == nil {
		return setName(l.parts)
	}
	return l.h.k.name
}

// Token is the random 128-bit owner token under which the lease holds the
// lock in Redis (hex). Leases taken by re-entry share their outer lease's
// token. A set's (LockAll) token is that of its first lock; Parts gives
// the others.
func (l *Lease) Token() string { return l.first().h.token }

// Fence is the lease's fencing token: it increases strictly with each
// owner that acquires the lock's name, and never goes back (its counter in
// Redis does not expire). Pass it to the resource the lock protects and
// have the resource refuse a fence lower than one it has seen: that stops
// a holder that lost its lease without knowing it (paused, partitioned)
// from acting as owner. Re-entry returns the outer lease's fence. A set's
// fence is that of its first lock: fences of different locks do not
// compare, so pass each resource the fence of its own lock (see Parts).
func (l *Lease) Fence() int64 { return l.first().h.fence }

// first is the lease itself, or a set's first part.
func (l *Lease) first() *Lease {
	if l.h == nil {
		return l.parts[0]
	}
	return l
}

// Done returns a channel that is closed when the lease ends: after Unlock,
// or as soon as the lease may have been lost. When it is closed, Err says
// why.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held. After it ends it returns an
// error matching ErrUnlocked (Unlock), ErrLeaseLost (lost or expired) or
// ErrClosed (the Client was closed). Err checks the lease's local deadline
// itself, so it never reports nil once the deadline has passed, even before
// the watchdog has run.
func (l *Lease) Err() error {
	if l.h == nil {
		for _, p := range l.parts {
			if err := p.Err(); err != nil {
				l.finish(err)
			}
		}
	} else {
		l.h.expireIfLate(time.Now())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// finish ends this lease with err: Done closes, contexts are cancelled.
func (l *Lease) finish(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	onEnd := l.onEnd
	l.onEnd = nil
	close(l.done)
	l.mu.Unlock()
	for _, f := range onEnd {
		f(err)
	}
}

// whenDone runs f with the lease's Err when the lease ends (at once if it
// has), and returns a func that forgets f.
func (l *Lease) whenDone(f func(error)) (forget func()) {
	id := new(int)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		f(err)
		return func() {}
	}
	if l.onEnd == nil {
		l.onEnd = make(map[*int]func(error))
	}
	l.onEnd[id] = f
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.onEnd, id)
		l.mu.Unlock()
	}
}

// leaseKey is how a context carries a lease for re-entry: one key per
// Client, lock and side (read or write), so locks nested in one another do
// not hide each other.
type leaseKey struct {
	c    *Client
	lock string
	side string
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
	forget := l.whenDone(cancel)
	context.AfterFunc(ctx, forget) // once the context ends on its own
	return l.carry(ctx)
}

// carry returns ctx carrying the lease, or a set's parts, for re-entry.
func (l *Lease) carry(ctx context.Context) context.Context {
	if l.h == nil {
		for _, p := range l.parts {
			ctx = p.carry(ctx)
		}
		return ctx
	}
	return context.WithValue(ctx, leaseKey{l.h.c, l.h.k.lock, l.h.side}, l)
}

// leaseFrom returns the lease that ctx carries for the lock's side, if any.
func leaseFrom(ctx context.Context, c *Client, lock, side string) *Lease {
	l, _ := ctx.Value(leaseKey{c, lock, side}).(*Lease)
	return l
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
	if l.h == nil {
		return l.unlockSet(ctx)
	}
	h := l.h
	h.op.Lock()
	defer h.op.Unlock()
	if err := l.Err(); err != nil {
		if !errors.Is(err, ErrUnlocked) {
			// Lost: if the key is still ours (a pause outlived the
			// deadline, say), free it now rather than at its expiry.
			if h.p.release(h.token, 0).run(ctx, h.c.rdb).Err() != nil {
				h.c.releaseLater(h)
			}
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	left := h.count - 1
	h.releasing = left == 0
	h.mu.Unlock()
	res, err := h.p.release(h.token, left).run(ctx, h.c.rdb).Int64()
	if err != nil {
		// The lease ends all the same. An inner lease's count is set
		// right by the next re-entry or unlock of the hold (counts are
		// absolute); the last one's release goes on in the background.
		h.mu.Lock()
		h.count = left
		delete(h.leases, l)
		h.mu.Unlock()
		l.finish(ErrUnlocked)
		if left == 0 {
			h.end(ErrUnlocked)
			h.c.releaseLater(h)
		}
		return redisErr("unlock", h.k.name, err)
	}
	if res < 0 {
		err := lost(h.k.name, "the lock was no longer held at unlock")
		h.end(err)
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	h.count = left
	delete(h.leases, l)
	h.mu.Unlock()
	l.finish(ErrUnlocked)
	if left == 0 {
		h.end(ErrUnlocked)
	}
	return nil
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
	if l.h == nil {
		return l.extendSet(ctx, d)
	}
	h := l.h
	h.op.Lock() // after an Unlock in flight, not beside it
	defer h.op.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	start := time.Now()
	ok, err := h.c.grant(ctx, h.p.renew(h.token, d, true)).Int64()
	if err != nil {
		return redisErr("extend", h.k.name, err)
	}
	if ok != 1 {
		err := lost(h.k.name, "the lock was no longer held at extend")
		h.end(err)
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	h.ttl = d
	h.epoch++                // a renewal in flight may have run before this
	h.deadline = time.Time{} // a shorter lease moves the deadline closer
	h.confirmed(start, d)
	h.c.wd.reschedule(h)
	h.mu.Unlock()
	return nil
}

// TTL returns how long the lock has left before it expires, as the server
// sees it. It returns an error matching ErrNotHeld when the lease has
// ended or the lock is no longer this owner's (the lease is then lost).
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, invalid("nil context")
	}
	if l.h == nil {
		return l.ttlSet(ctx)
	}
	h := l.h
	h.op.Lock() // after an Unlock in flight, not beside it
	defer h.op.Unlock()
	if err := l.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	ms, err := h.p.ttl(h.token).run(ctx, h.c.rdb).Int64()
	if err != nil {
		return 0, redisErr("ttl", h.k.name, err)
	}
	if ms == -3 {
		err := lost(h.k.name, "the lock was no longer held")
		h.end(err)
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
