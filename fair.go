package dlock

import (
	"context"

	"github.com/dlock-go/dlock/internal/protocol"
)

// FairMutex is a reentrant lock granted in arrival order: waiters from
// every process form one queue in Redis, ordered by server time, and a
// release keeps the lock for the waiter at its head and wakes only it.
// TryLock never jumps the queue: it fails while anyone waits. (A Mutex
// hands on the same way; it differs in letting a newcomer take a lock that
// is free and kept for nobody.)
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
// those of a Mutex of the same name, so a Mutex and a FairMutex of one
// name are one lock, with one queue.
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	k := c.keys(protocol.MutexKind, name)
	return &FairMutex{Mutex{handle{c, k, opts}, c.mutexRequest("FairMutex", k, opts, true)}}
}

// Name returns the lock's name.
func (f *FairMutex) Name() string { return f.m.k.Name }

func (f *FairMutex) order() string { return f.m.k.Lock }

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
	return f.m.c.acquire(ctx, f.m.req, wait, opts)
}
