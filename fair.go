package dlock

import (
	"context"
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
	return &FairMutex{Mutex{handle{c, c.keys(kindMutex, name), opts}}}
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
	if f == nil || f.m.c == nil {
		return nil, invalid("nil FairMutex")
	}
	c, k := f.m.c, f.m.k
	return c.acquire(ctx, request{what: "FairMutex", k: k, p: fairProto{mutexProto{k, c.publish}}, handle: f.m.opts, queue: true, takes: optQueueTTL,
		call: func(token string, cfg lockConfig, queued bool) call {
			return call{fairLockScript, []string{k.lock, k.fence, k.queue, k.alive},
				[]any{token, cfg.ttl.Milliseconds(), placeTTL(cfg, queued), k.channel, c.publish}}
		}}, wait, opts)
}

// placeTTL is how long a queued attempt keeps its place in the queue: 0
// for a TryLock's, which takes none.
func placeTTL(cfg lockConfig, queued bool) int64 {
	if !queued {
		return 0
	}
	return cfg.queueTTL.Milliseconds()
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
