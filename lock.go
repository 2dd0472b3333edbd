package dlock

import (
	"context"

	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/redis/go-redis/v9"
	"time"
)

// Locker is what every lock of this package offers: Mutex, FairMutex, and
// the read and write sides of an RWMutex. LockAll takes any mix of them.
type Locker interface {
	// Lock acquires the lock, waiting until it is free or ctx ends.
	Lock(ctx context.Context, opts ...LockOption) (*Lease, error)
	// TryLock makes one attempt and fails with ErrNotObtained if the lock
	// is held.
	TryLock(ctx context.Context, opts ...LockOption) (*Lease, error)
	// Name is the lock's name.
	Name() string

	// order is the key LockAll sorts by, so that every caller takes the
	// same set of locks in the same order.
	order() string
}

// protocol is what a kind of hold does in Redis, as script calls whose
// replies follow one convention, so that Lease and the watchdog serve
// every primitive:
//
//	release  1 done, -1 not held (left = 0 frees every hold of the token)
//	renew    1 renewed, 0 not held
//	ttl      milliseconds left, -3 not held
//
// renew with exact set makes the hold's TTL exactly ttl (Extend); without,
// at least ttl (the watchdog): a renewal still in flight when Extend
// lengthened a lease must not shorten it again on the server.
type protocol interface {
	release(token string, left int) op
	renew(token string, ttl time.Duration, exact bool) op
	ttl(token string) op
}

// reentrant is the protocol of a hold that can be re-entered (Mutex,
// FairMutex, RWMutex; not a Semaphore's permits):
//
//	reenter  {1, ...} held with the new count, {-1} not held
type reentrant interface {
	reenter(token string, count int, ttl time.Duration) op
}

// op is one operation on Redis with an integer or array reply: a script
// call, or, without scripts, a transaction (see plain.go).
type op interface {
	run(ctx context.Context, r Redis) *redis.Cmd
}

// attemptFunc makes one acquire attempt. It returns the lease when the
// lock was taken; otherwise how long to wait at most before trying again
// (the holder's remaining lease, say). queued is true for a Lock's
// attempts, false for a TryLock's.
type attemptFunc func(ctx context.Context, queued bool) (*Lease, time.Duration, error)

// acquisition is one Lock or TryLock call: the wait loop shared by the
// primitives.
type acquisition struct {
	c       *Client
	name    string
	channel string
	token   string
	p       protocol
	attempt attemptFunc
	// keepAlive, when positive, is how often a waiter must try again at
	// the least, to keep its place in a queue alive.
	keepAlive time.Duration
	// need is the permits a semaphore waiter waits for (0 for locks).
	need int
	// abandon, if set, runs when a Lock gives up without the lock (ctx
	// ended, client closed, Redis error): it removes the waiter's place
	// in a queue.
	abandon func(ctx context.Context)
}

// run acquires: one attempt, then, for a Lock, waits woken by releases.
// An attempt that fails with an unknown outcome is undone before run
// returns, so that no lock is left held by nobody.
func (a *acquisition) run(ctx context.Context, wait bool) (l *Lease, err error) {
	c := a.c
	if wait && a.abandon != nil {
		defer func() {
			if l == nil {
				a.cleanup(ctx, a.abandon)
			}
		}()
	}
	l, next, err := a.try(ctx, wait)
	if l != nil || err != nil {
		return l, err
	}
	if !wait {
		return nil, fmt.Errorf("%w: %q is held", ErrNotObtained, a.name)
	}

	err = c.waitLoop(ctx, a.name, a.channel, a.token, a.need, a.bound(next),
		func(ctx context.Context) (bool, time.Duration, error) {
			var next time.Duration
			l, next, err = a.try(ctx, true)
			return l != nil || err != nil, a.bound(next), err
		})
	return l, err
}

// waitLoop waits on a lock's channel until check reports done or fails.
// It subscribes first, then checks (a release may have come before the
// subscription), then sleeps until a notification or first/the next
// bound that check returned, whichever is sooner, and checks again. When
// ctx ends it returns an error matching ErrNotObtained and ctx.Err(); when
// the Client closes, ErrClosed.
func (c *Client) waitLoop(ctx context.Context, name, channel, token string, need int, first time.Duration,
	check func(context.Context) (done bool, next time.Duration, err error)) error {
	// One wake channel, however many nodes may publish the release.
	wake := make(chan struct{}, 1)
	var ready <-chan struct{}
	for _, h := range c.hubs {
		w, err := h.join(channel, token, need, wake)
		if err != nil {
			return err
		}
		defer h.leave(w)
		if ready == nil {
			ready = w.ready // the first node's is enough to know
		}
	}
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ready:
			ready = nil // closed now; once is enough
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return waitEnded(name, ctx.Err())
		case <-c.life.Done():
			return ErrClosed
		}
		done, next, err := check(ctx)
		if done || err != nil {
			return err
		}
		timer.Reset(next)
	}
}

// try makes one attempt and undoes it when its outcome is unknown.
func (a *acquisition) try(ctx context.Context, queued bool) (*Lease, time.Duration, error) {
	l, next, err := a.attempt(ctx, queued)
	if err == nil {
		return l, next, nil
	}
	a.c.clusterHint(err)
	if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidArgument) {
		a.cleanup(ctx, func(ctx context.Context) {
			_ = a.p.release(a.token, 0).run(ctx, a.c.rdb).Err()
		})
	}
	if ctx.Err() != nil {
		return nil, 0, waitEnded(a.name, ctx.Err())
	}
	return nil, 0, err
}

// bound caps a wait at the keep-alive interval.
func (a *acquisition) bound(d time.Duration) time.Duration {
	if a.keepAlive > 0 && d > a.keepAlive {
		return a.keepAlive
	}
	return d
}

// cleanup runs f even when ctx has ended, for a bounded time.
func (a *acquisition) cleanup(ctx context.Context, f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	f(ctx)
}

// cleanupTimeout bounds the release that follows an ambiguous failure.
const cleanupTimeout = 2 * time.Second

// newLease registers a hold that an attempt has just taken with the
// watchdog and returns its first lease. If the client was closed
// meanwhile it undoes the hold and returns ErrClosed.
func (c *Client) newLease(ctx context.Context, h *hold) (*Lease, error) {
	l, _ := h.newLease()
	if !c.wd.add(h) {
		_ = h.p.release(h.token, 0).run(context.WithoutCancel(ctx), c.rdb).Err()
		return nil, ErrClosed
	}
	return l, nil
}

// checkCall validates what every acquire checks first.
func checkCall(ctx context.Context, c *Client, name string) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if c == nil {
		return invalid("nil lock handle")
	}
	if name == "" {
		return invalid("empty lock name")
	}
	if c.closed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return waitEnded(name, err)
	}
	return nil
}

// reenter adds a lease to the hold that outer belongs to: the hold count
// goes up by one in Redis and the lease gets the hold's token and fence.
func reenter(ctx context.Context, outer *Lease) (*Lease, error) {
	h := outer.of.first()
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := outer.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	count, ttl, epoch := h.count+1, h.ttl, h.epoch
	h.mu.Unlock()
	start := time.Now()
	res, err := h.c.be.grant(ctx, h.p.(reentrant).reenter(h.token, count, ttl)).Int64Slice()
	if err != nil {
		// The hold count in Redis may or may not be count now; the next
		// re-entry or unlock sets it to the right value again.
		return nil, redisErr("lock", h.k.name, err)
	}
	if len(res) < 1 || res[0] != replyHeld {
		err := lost(h.k.name, "the lock was no longer held at re-entry")
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
		h.c.wd.reschedule(h)
	}
	h.mu.Unlock()
	return l, nil
}

// newToken returns 128 random bits from crypto/rand, in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// retryAfter turns a holder's remaining lease (PTTL) into the longest
// wait before the next attempt. A key without expiry (never set by dlock)
// is retried after a TTL, in case no release is ever published for it.
func retryAfter(pttl int64, ttl time.Duration) time.Duration {
	if pttl < 0 {
		return ttl
	}
	return time.Duration(pttl) * time.Millisecond
}

// fenceReply reads a {1, fence} / {0, pttl} / {-1} reply.
func fenceReply(op, name string, cmd interface{ Int64Slice() ([]int64, error) }) ([]int64, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return nil, redisErr(op, name, err)
	}
	if len(res) < 1 || (res[0] >= 0 && len(res) < 2) {
		return nil, redisErr(op, name, errors.New("unexpected script reply"))
	}
	return res, nil
}
