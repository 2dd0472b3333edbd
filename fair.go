package dlock

import (
	"context"
	"time"
)

// FairMutex is a reentrant lock granted in arrival order: waiters from
// every process form one queue in Redis, ordered by server time, and a
// release wakes only the waiter at its head. TryLock never jumps the
// queue: it fails while anyone waits.
//
// A place in the queue lives only while its waiter keeps it alive: a
// waiter renews its place every QueueTTL/3 (WithQueueTTL; 3 s by default)
// as it waits. A waiter that gives up (its context ended) leaves the queue
// at once and hands the turn on; one that dies is skipped QueueTTL + 1/3
// after its last renewal at most. A dead waiter never stalls the queue
// longer than that.
//
// Leases, fencing, renewal and re-entry are as for Mutex. Like a Mutex
// handle, a FairMutex is safe for concurrent use.
type FairMutex struct {
	m Mutex
}

// FairMutex returns the handle of the fair lock called name. Its keys are
// those of a Mutex of the same name plus the queue, so a Mutex and a
// FairMutex of one name exclude each other (do not mix them: the Mutex
// ignores the queue).
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	return &FairMutex{Mutex{c: c, k: c.keys(kindMutex, name), opts: opts}}
}

// Name returns the lock's name.
func (f *FairMutex) Name() string { return f.m.k.name }

func (f *FairMutex) order() string { return f.m.k.lock }

// Lock takes a place in the queue and waits for its turn, as long as ctx
// allows. When ctx ends first it leaves the queue (waking the next waiter
// if the lock is free) and returns an error matching ErrNotObtained and
// ctx.Err(). It re-enters like Mutex.Lock and returns the same errors.
func (f *FairMutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return f.acquire(ctx, true, opts)
}

// TryLock takes the lock if it is free and nobody is waiting for it, in
// one round trip; otherwise it returns an error matching ErrNotObtained
// and takes no place in the queue.
func (f *FairMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return f.acquire(ctx, false, opts)
}

func (f *FairMutex) acquire(ctx context.Context, wait bool, opts []LockOption) (*Lease, error) {
	if f == nil {
		return nil, invalid("nil FairMutex")
	}
	m := &f.m
	if err := checkCall(ctx, m.c, m.k.name); err != nil {
		return nil, err
	}
	if err := m.c.singleNode("FairMutex"); err != nil {
		return nil, err
	}
	cfg := defaultLock.with(m.opts).with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if outer := leaseFrom(ctx, m.c, m.k.lock, ""); outer != nil {
		return reenter(ctx, outer)
	}
	c, k := m.c, m.k
	p := fairProto{mutexProto{k, c.publish}}
	token := newToken()
	a := acquisition{c: c, name: k.name, channel: k.channel, token: token, p: p,
		keepAlive: cfg.queueTTL / 3,
		attempt: func(ctx context.Context, queued bool) (*Lease, time.Duration, error) {
			placeTTL := int64(0)
			if queued {
				placeTTL = cfg.queueTTL.Milliseconds()
			}
			start := time.Now()
			res, err := fenceReply("lock", k.name, c.grant(ctx, call{fairLockScript,
				[]string{k.lock, k.fence, k.queue, k.alive},
				[]any{token, cfg.ttl.Milliseconds(), placeTTL, k.channel, c.publish}}))
			if err != nil {
				return nil, 0, err
			}
			if res[0] != replyHeld {
				return nil, retryAfter(res[1], cfg.ttl), nil
			}
			l, err := c.newLease(ctx, newHold(c, k, p, token, res[1], cfg, start))
			return l, 0, err
		},
		abandon: c.leaveQueue(k, token)}
	return a.run(ctx, wait)
}

// leaveQueue returns what a queued waiter (FairMutex, RWMutex writer)
// runs when it gives up: it leaves the queue, and the next waiter is told
// if the lock is free.
func (c *Client) leaveQueue(k keys, token string) func(context.Context) {
	return func(ctx context.Context) {
		_ = fairLeaveScript.run(ctx, c.rdb, []string{k.lock, k.queue, k.alive},
			token, k.channel, c.publish).Err()
	}
}

// fairProto is the Redis side of a FairMutex hold: a Mutex hold whose
// release hands the lock to the head of the queue.
type fairProto struct {
	mutexProto
}

func (p fairProto) release(token string, left int) op {
	return call{fairUnlockScript, []string{p.k.lock, p.k.queue, p.k.alive},
		[]any{token, left, p.k.channel, p.publish}}
}
