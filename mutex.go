package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Mutex is a reentrant lock with one owner at a time. It is a handle: it
// holds no state of its own, costs nothing to make, and is safe for
// concurrent use; every Lock or TryLock that succeeds returns a new owner,
// its Lease.
//
// In Redis the lock is a hash "<prefix>:{<name>}" mapping the owner's token
// to its hold count, with a PEXPIRE; "<prefix>:{<name>}:fence" counts the
// owners for fencing tokens; releases are published on
// "<prefix>:{<name>}:ch".
type Mutex struct {
	c    *Client
	k    keys
	opts []LockOption
}

// Mutex returns the handle of the reentrant lock called name. Any string is
// a valid name but the empty one (Lock reports that); braces, spaces and
// non-ASCII text are fine. opts set the handle's defaults for Lock and
// TryLock: renewal every TTL/3 with a 30 s TTL unless they say otherwise.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	return &Mutex{c: c, k: c.keys(name), opts: opts}
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.k.name }

// Lock acquires the lock, waiting while another owner holds it. The wait
// is woken by the holder's release (pub/sub), and is also bounded by the
// holder's remaining lease, so a lost notification costs at most that.
// Uncontended, Lock is one round trip.
//
// If ctx carries a lease of this lock (it was made by that lease's
// Context), Lock re-enters instead: the hold count goes up, the returned
// lease has the same token and fence, and the lock stays held until both
// leases are unlocked.
//
// When ctx ends first, Lock returns an error matching both ErrNotObtained
// and ctx.Err(), and holds nothing. Other errors: ErrInvalidArgument for
// bad input, ErrClosed, ErrNotHeld when re-entering a lease that has
// ended, and Redis errors, wrapped (after which any acquisition that may
// have happened has been undone).
func (m *Mutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.acquire(ctx, true, opts)
}

// TryLock makes one attempt to acquire the lock (one round trip) and
// returns an error matching ErrNotObtained at once if another owner holds
// it. It re-enters like Lock, and returns the same other errors.
func (m *Mutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.acquire(ctx, false, opts)
}

func (m *Mutex) acquire(ctx context.Context, wait bool, opts []LockOption) (*Lease, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	if m == nil || m.c == nil {
		return nil, invalid("nil Mutex")
	}
	if m.k.name == "" {
		return nil, invalid("empty lock name")
	}
	cfg := defaultLock.with(m.opts).with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := m.c
	if c.closed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, waitEnded(m.k.name, err)
	}
	if outer := leaseFrom(ctx, c, m.k.lock); outer != nil {
		return m.reenter(ctx, outer)
	}

	token := newToken()
	held, wait0, err := m.attempt(ctx, token, cfg)
	if held != nil || err != nil {
		return held, err
	}
	if !wait {
		return nil, ErrNotObtained
	}

	// Contended: subscribe to the lock's releases, then try again (a
	// release may have come before the subscription), then sleep until a
	// release or the holder's lease runs out, whichever comes first.
	w, err := c.hub.join(ctx, m.k.channel)
	if err != nil {
		return nil, err
	}
	defer c.hub.leave(w)
	timer := time.NewTimer(wait0)
	defer timer.Stop()
	select {
	case <-w.ready:
	case <-w.wake:
	case <-timer.C:
	case <-ctx.Done():
		return nil, waitEnded(m.k.name, ctx.Err())
	case <-c.life.Done():
		return nil, ErrClosed
	}
	for {
		held, next, err := m.attempt(ctx, token, cfg)
		if held != nil || err != nil {
			return held, err
		}
		timer.Reset(next)
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, waitEnded(m.k.name, ctx.Err())
		case <-c.life.Done():
			return nil, ErrClosed
		}
	}
}

// attempt runs the acquire script once. It returns the lease when the lock
// was taken, or how long to wait before trying again when another owner
// holds it. On a Redis error it undoes whatever the call may have done
// (the reply may have been lost after the script ran) and returns the
// error.
func (m *Mutex) attempt(ctx context.Context, token string, cfg lockConfig) (*Lease, time.Duration, error) {
	c := m.c
	start := time.Now()
	res, err := lockScript.run(ctx, c.rdb, []string{m.k.lock, m.k.fence},
		token, cfg.ttl.Milliseconds(), 0).Int64Slice()
	if err != nil {
		c.releaseAfter(ctx, m.k, token)
		if ctx.Err() != nil {
			return nil, 0, waitEnded(m.k.name, ctx.Err())
		}
		return nil, 0, redisErr("lock", m.k.name, err)
	}
	if len(res) != 2 {
		return nil, 0, redisErr("lock", m.k.name, errors.New("unexpected script reply"))
	}
	if res[0] != 1 {
		return nil, retryAfter(res[1], cfg.ttl), nil
	}
	h := newHold(c, m.k, token, res[1], cfg, start)
	l, _ := h.newLease()
	if !c.wd.add(h) {
		c.releaseAfter(ctx, m.k, token)
		return nil, 0, ErrClosed
	}
	return l, 0, nil
}

// retryAfter turns the holder's remaining lease (PTTL) into the longest
// wait before the next attempt. A key without expiry (never set by dlock)
// is retried after a TTL, in case no release is ever published for it.
func retryAfter(pttl int64, ttl time.Duration) time.Duration {
	if pttl < 0 {
		return ttl
	}
	return time.Duration(pttl) * time.Millisecond
}

// reenter adds a lease to the hold that outer belongs to.
func (m *Mutex) reenter(ctx context.Context, outer *Lease) (*Lease, error) {
	h := outer.h
	h.op.Lock()
	defer h.op.Unlock()
	if err := outer.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	count, ttl, epoch := h.count+1, h.ttl, h.epoch
	h.mu.Unlock()
	start := time.Now()
	res, err := lockScript.run(ctx, m.c.rdb, []string{m.k.lock, m.k.fence},
		h.token, ttl.Milliseconds(), count).Int64Slice()
	if err != nil {
		// The hold count in Redis may or may not be count now; the next
		// re-entry or unlock sets it to the right value again.
		return nil, redisErr("lock", m.k.name, err)
	}
	if len(res) < 1 || res[0] != 1 {
		err := lost(m.k.name, "the lock was no longer held at re-entry")
		h.end(err)
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	l, err := h.newLease()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	h.count = count
	if h.epoch == epoch {
		h.confirmed(start, ttl)
	}
	h.mu.Unlock()
	return l, nil
}

// releaseAfter frees the lock if token holds it, after a failed call whose
// effect is unknown. It runs even when ctx has ended, for a bounded time,
// so that a cancelled acquire never leaves a lock held by nobody.
func (c *Client) releaseAfter(ctx context.Context, k keys, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = c.release(ctx, k, token)
}

// cleanupTimeout bounds the release that follows an ambiguous failure.
const cleanupTimeout = 2 * time.Second

// release frees every hold that token has on the lock, and tells waiters.
func (c *Client) release(ctx context.Context, k keys, token string) error {
	return unlockScript.run(ctx, c.rdb, []string{k.lock}, token, 0, k.channel, c.publish).Err()
}

// newToken returns 128 random bits from crypto/rand, in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
