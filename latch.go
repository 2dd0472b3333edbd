package dlock

import (
	"context"
	"time"
)

// Latch is a count-down latch: waiters block until the count, set once,
// has been counted down to zero. At zero the latch is deleted and every
// waiter (in every process) is woken; a latch that is never counted down
// expires after the TTL given to TrySetCount.
//
// Wait returns as soon as the latch does not exist: counted down to zero,
// expired, or never set. Set the count before anyone waits.
//
// CountDown counts every call. CountDownOnce counts once per id: a worker
// that retries after an ambiguous failure, or runs twice, passes the same
// id and is counted once.
//
// A handle is safe for concurrent use.
type Latch struct {
	c *Client
	k *keys
}

// Latch returns the handle of the count-down latch called name.
func (c *Client) Latch(name string) *Latch {
	return &Latch{c: c, k: c.keys(kindLatch, name)}
}

// Name returns the latch's name.
func (l *Latch) Name() string { return l.k.name }

// TrySetCount sets the count to n (at least 1) if the latch has no count,
// with a time to live of ttl (at least 1 ms), and reports whether it did.
// One round trip.
func (l *Latch) TrySetCount(ctx context.Context, n int64, ttl time.Duration) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if n < 1 {
		return false, invalid("latch %q: count %d; want at least 1", l.k.name, n)
	}
	if ttl < minTTL {
		return false, invalid("latch %q: TTL %v is below 1ms", l.k.name, ttl)
	}
	ok, err := latchSetScript.run(ctx, l.c.rdb, []string{l.k.lock, l.k.ids}, n, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, redisErr("set count", l.k.name, err)
	}
	return ok == 1, nil
}

// CountDown counts the latch down by one and returns the count left; at
// zero the waiters are woken. Counting down a latch that does not exist
// does nothing and returns 0. One round trip.
func (l *Latch) CountDown(ctx context.Context) (int64, error) {
	return l.countDown(ctx, "")
}

// CountDownOnce counts the latch down by one unless id has already
// counted it down, and returns the count left. id must not be empty.
func (l *Latch) CountDownOnce(ctx context.Context, id string) (int64, error) {
	if id == "" {
		return 0, invalid("latch %q: empty id", l.k.name)
	}
	return l.countDown(ctx, id)
}

func (l *Latch) countDown(ctx context.Context, id string) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	n, err := latchDownScript.run(ctx, l.c.rdb, []string{l.k.lock, l.k.ids},
		id, l.k.channel, l.c.publish).Int64()
	if err != nil {
		return 0, redisErr("count down", l.k.name, err)
	}
	return n, nil
}

// Count returns the count left: 0 when the latch does not exist.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	n, _, err := l.count(ctx)
	return n, err
}

// Wait blocks until the latch is open (its count reached zero, or it does
// not exist) or ctx ends. It is woken by the count-down that opens it; if
// that notification is lost it notices when the latch would expire. When
// ctx ends first it returns an error matching ErrNotObtained and
// ctx.Err().
func (l *Latch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	n, left, err := l.count(ctx)
	if err != nil || n == 0 {
		return err
	}
	return l.c.waitLoop(ctx, l.k.name, l.k.channel, "", nil, left,
		func(ctx context.Context, _ string) (bool, time.Duration, error) {
			n, left, err := l.count(ctx)
			return n == 0, left, err
		})
}

// count returns the count and how long the latch has to live.
func (l *Latch) count(ctx context.Context) (int64, time.Duration, error) {
	rs := l.c.rdb.Pipeline(ctx, []Command{keyed("GET", l.k.lock), keyed("PTTL", l.k.lock)})
	if err := firstErr(rs); err != nil {
		return 0, 0, redisErr("count", l.k.name, err)
	}
	if rs[0].Val == nil {
		return 0, 0, nil
	}
	n, err := rs[0].Int64()
	if err != nil {
		return 0, 0, redisErr("count", l.k.name, err)
	}
	ms, _ := rs[1].Int64()
	left := time.Duration(ms) * time.Millisecond
	if left <= 0 {
		// No expiry (not set by dlock): still wait for the notification,
		// checking again now and then.
		left = time.Second
	}
	return max(n, 0), left, nil
}

func (l *Latch) check(ctx context.Context) error {
	if l == nil {
		return invalid("nil Latch")
	}
	if err := checkCall(ctx, l.c, l.k.name); err != nil {
		return err
	}
	if err := l.c.be.supports("Latch"); err != nil {
		return err
	}
	return nil
}
