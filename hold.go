package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// hold is one owner's possession of a lock in Redis: a token with a hold
// count. Re-entry adds leases to the same hold; the hold ends when its last
// lease is unlocked, or for all of its leases at once when it is lost.
type hold struct {
	c        *Client
	k        *keys
	p        protocol
	what     string    // the primitive, for telemetry
	acquired time.Time // when the attempt that took it was sent
	side     side      // the side of an RWMutex hold; "" for other locks
	token    string
	fence    int64
	renew    bool // the watchdog renews it

	// calls serialises the calls that set the hold count in Redis (re-entry
	// and unlock), so that the count they send is the one they read.
	calls sync.Mutex

	mu        sync.Mutex
	count     int           // holds in Redis (under op for writes)
	ttl       time.Duration // lease length used by renewals
	deadline  time.Time     // local: the lease may be gone after this
	nextRenew time.Time     // when the watchdog renews it next
	renewing  bool          // a renewal of it is in flight
	// Its places in the watchdog's schedules (guarded by the watchdog's mu).
	deadlineAt, renewAt slot
	releasing           bool     // its final Unlock is in flight: a renewal that finds it gone is not a loss
	epoch               int      // bumped by Extend: older renewals confirm nothing
	leases              []*Lease // unlocked ones are removed (few: one per re-entry)
	err                 error    // why the hold ended; nil while held
	unsure              []unsure // calls given up on that may still set the lease (see mayHaveSet)
}

// unsure is a call given up on (its ctx ended first) that may still set
// the lease to exactly d on the server — an Extend, a re-entry — at any
// time until go-redis is done with it (done).
type unsure struct {
	d    time.Duration
	done <-chan struct{}
	seen time.Time // when it was first seen done; zero until then
}

func newHold(c *Client, k *keys, what string, p protocol, token string, fence int64, cfg lockConfig, start time.Time) *hold {
	h := &hold{c: c, k: k, what: what, acquired: start, p: p, token: token, fence: fence, renew: cfg.renew, count: 1,
		ttl: cfg.ttl, deadlineAt: slot{index: -1}, renewAt: slot{index: -1}}
	h.confirmed(start, cfg.ttl)
	return h
}

// confirmed records that a request sent at start set the lease to ttl: the
// server will not expire it before start+ttl, and the local deadline keeps
// a drift margin below that. Call with h.mu held, or before h is shared.
func (h *hold) confirmed(start time.Time, ttl time.Duration) {
	if len(h.unsure) > 0 {
		ttl = h.capped(start, ttl)
	}
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
	l := &Lease{of: h, done: make(chan struct{})}
	h.leases = append(h.leases, l)
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
	for _, l := range leases {
		l.finish(err)
	}
	h.c.wd.remove(h)
	h.c.tel.holdEnded(h, err)
}

// expireIfLate ends the hold as lost when its local deadline has passed,
// whether or not the watchdog has woken up yet to notice.
func (h *hold) expireIfLate(now time.Time) {
	h.mu.Lock()
	late := h.err == nil && !now.Before(h.deadline)
	h.mu.Unlock()
	if late {
		reason, why := reasonDeadline, "no renewal confirmed before its deadline"
		if !h.renew {
			reason, why = reasonEnded, "its fixed lease ran out"
		}
		h.end(lost(reason, h.k.name, why))
	}
}

// A hold is what a single lease holds (see held).

func (h *hold) name() string            { return h.k.name }
func (h *hold) first() *hold            { return h }
func (h *hold) check()                  { h.expireIfLate(time.Now()) }
func (h *hold) parts(l *Lease) []*Lease { return []*Lease{l} }

// carry returns ctx carrying l for re-entry.
func (h *hold) carry(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{h.c, h.k.lock, h.side}, l)
}

// unlock is Lease.Unlock of one of h's leases.
func (h *hold) unlock(ctx context.Context, l *Lease) error {
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		if !errors.Is(err, ErrUnlocked) {
			// Lost: if the key is still ours (a pause outlived the
			// deadline, say), free it now rather than at its expiry.
			if h.release(ctx) != nil {
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
	if err == nil && res < 0 {
		err := lost(reasonGone, h.k.name, "the lock was no longer held at unlock")
		h.end(err)
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	// The lease ends, whether or not the call succeeded. After a failed
	// call an inner lease's count is set right by the hold's next
	// re-entry or unlock (counts are absolute), and the last one's release
	// goes on in the background.
	h.mu.Lock()
	h.count = left
	h.leases = slices.DeleteFunc(h.leases, func(x *Lease) bool { return x == l })
	h.mu.Unlock()
	l.finish(ErrUnlocked)
	if left == 0 {
		h.end(ErrUnlocked)
		if err != nil {
			h.c.releaseLater(h)
		}
	}
	if err != nil {
		return redisErr("unlock", h.k.name, err)
	}
	return nil
}

// extend is Lease.Extend of one of h's leases.
func (h *hold) extend(ctx context.Context, l *Lease, d time.Duration) error {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	start := time.Now()
	ok, err := h.c.be.grant(ctx, h.p.renew(h.token, d, true)).Int64()
	if err != nil {
		h.mayHaveSet(start, d, settled(err))
		return redisErr("extend", h.k.name, err)
	}
	if ok != 1 {
		err := lost(reasonGone, h.k.name, "the lock was no longer held at extend")
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

// mayHaveSet records a call sent at start that sets the lease to exactly
// d (Extend; a re-entry sets it to the TTL) and whose outcome is unknown:
// given up on when its ctx ended, it may still run on the server, at any
// time until done closes, and set the lease to d from then — shorter than
// what the hold counts on, or shorter than what a later Extend or renewal
// confirms. So the local deadline moves to start+d (less the drift margin)
// if that is closer, the next renewal comes within d/3, and until the
// call is done no confirmation counts on more than d from its own start
// (capped). The hold then never believes in more than the server may
// give it.
func (h *hold) mayHaveSet(start time.Time, d time.Duration, done <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsure = append(h.unsure, unsure{d: d, done: done})
	if dl := start.Add(d - h.c.drift.of(d)); dl.Before(h.deadline) {
		h.deadline = dl
	}
	if next := start.Add(d / 3); next.Before(h.nextRenew) {
		h.nextRenew = next
	}
	h.c.wd.reschedule(h)
}

// capped caps ttl, confirmed by a request sent at start, by the calls
// that may still set the lease (see mayHaveSet). A call stops capping
// once a confirmation was sent after it was seen done: the server ran it,
// if ever, before that request. h.mu is held.
func (h *hold) capped(start time.Time, ttl time.Duration) time.Duration {
	now := time.Now()
	keep := h.unsure[:0]
	for _, u := range h.unsure {
		if u.seen.IsZero() {
			select {
			case <-u.done:
				u.seen = now
			default:
			}
		}
		if !u.seen.IsZero() && !start.Before(u.seen) {
			continue
		}
		ttl = min(ttl, u.d)
		keep = append(keep, u)
	}
	h.unsure = keep
	return ttl
}

// ttlLeft is Lease.TTL of one of h's leases.
func (h *hold) ttlLeft(ctx context.Context, l *Lease) (time.Duration, error) {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	ms, err := h.p.ttl(h.token).run(ctx, h.c.rdb).Int64()
	if err != nil {
		return 0, redisErr("ttl", h.k.name, err)
	}
	if ms == replyTTLNotHeld {
		err := lost(reasonGone, h.k.name, "the lock was no longer held")
		h.end(err)
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
