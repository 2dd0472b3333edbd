package dlock

import (
	"context"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/kinds"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Mutex is a reentrant lock with one owner at a time. It is a handle: it
// holds no state of its own, costs nothing to make, and is safe for
// concurrent use; every Lock or TryLock that succeeds returns a new owner,
// its Lease.
//
// A waiting Lock registers in Redis; a release hands the lock to the
// waiter that has waited longest and tells it alone, on its Client's
// channel, with a message that carries the lock (its fence): the woken
// Lock returns without a round trip of its own, and no other process is
// sent anything, whatever the number of waiters. (A fixed lease has the
// lock kept for it instead, and takes it with one attempt.) A newcomer
// takes the lock only when it is free and not kept for a waiter, so under
// contention the lock goes round in arrival order and no waiter is passed
// over. A waiter renews its place every QueueTTL/3 (WithQueueTTL, 3 s by
// default) as it waits; a waiter killed just before its turn holds the
// lock for the rest of its place at most. FairMutex differs only at the edges: its TryLock fails while
// anyone waits, and a lock left free with waiters goes to the first.
//
// In Redis the lock is one string "<prefix>:{<name>}", the hold: the
// owner's token, its fence, when it was taken, its hold count, its
// sequence and its label (internal/protocol/scripts/lib_mutex.lua), set
// with its TTL by SET PX; fences
// come from a counter the locks share (internal/protocol/doc.go, "Fence counters"); the
// waiters are "<prefix>:{<name>}:queue" and ":alive".
type Mutex struct {
	handle
	req *request // what its acquires tell the acquire path: made once (it does not change)
}

// handle is what every lock handle is: a name on a Client, with default
// options for its acquires.
type handle struct {
	c    *Client
	k    *protocol.Keys
	opts []LockOption
}

// Name returns the lock's name.
func (h *handle) Name() string { return h.k.Name }

// order is the key LockAll sorts by.
func (h *handle) order() string { return h.k.Lock }

// Mutex returns the handle of the reentrant lock called name. Any string is
// a valid name but the empty one (Lock reports that); braces, spaces and
// non-ASCII text are fine. opts set the handle's defaults for Lock and
// TryLock: renewal every TTL/3 with a 30 s TTL unless they say otherwise.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	k := c.keys(protocol.MutexKind, name)
	return &Mutex{handle{c, k, opts}, c.mutexRequest("Mutex", k, opts, false)}
}

// Lock acquires the lock, waiting while another owner holds it. The wait
// is woken by the release that hands the lock on to it (pub/sub), and is
// also bounded by the holder's remaining lease and by QueueTTL/3, so a lost
// notification costs at most that.
// Uncontended, Lock is one round trip.
//
// If ctx carries a lease of this lock (it was made by that lease's
// Context), Lock re-enters instead: the hold count goes up, the returned
// lease has the same token and fence, and the lock stays held until both
// leases are unlocked. Re-entry keeps the outer lease's TTL and renewal.
//
// Lock never returns a lease that has already ended: a grant whose reply
// came after the lease's local deadline (the server stalled longer than
// the TTL) is released, and Lock acquires again (for a TTL within the
// drift margin, which no reply can find valid, it fails with an error
// matching ErrNotObtained and ErrLeaseLost).
//
// When ctx ends first, Lock returns an error matching both ErrNotObtained
// and ctx.Err(), and holds nothing. Other errors: ErrInvalidArgument for
// bad input, ErrClosed, ErrNotHeld when re-entering a lease that has
// ended, and Redis errors, wrapped (after which any acquisition that may
// have happened is undone: at once when the server answers, else in the
// background, tried again until it answers, for twice the TTL and at
// least 30 s; see docs/guarantees.md). On a quorum, a *QuorumError; a
// new quorum issues no fence until every node has answered once, and a
// Lock waits for that within ctx (a TryLock returns the *QuorumError,
// backend.Op "fence", naming the nodes not yet seen).
func (m *Mutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.acquire(ctx, true, opts)
}

// TryLock makes one attempt to acquire the lock (one round trip) and
// returns an error matching ErrNotObtained at once if another owner holds
// it, or if the attempt won but its reply came after the lease's local
// deadline (the error then also matches ErrLeaseLost; what it took is
// released). It re-enters like Lock, and returns the same other errors.
func (m *Mutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.acquire(ctx, false, opts)
}

func (m *Mutex) acquire(ctx context.Context, wait bool, opts []LockOption) (*Lease, error) {
	if m == nil || m.c == nil {
		return nil, invalid("nil Mutex")
	}
	return m.c.acquire(ctx, m.req, wait, opts)
}

// mutexRequest is what a Mutex or FairMutex tells the acquire path.
func (c *Client) mutexRequest(what string, k *protocol.Keys, opts []LockOption, fair bool) *request {
	p := kinds.Mutex{K: k, W: k.Wake}
	labels := c.labels()
	return &request{Request: backend.Request{What: what, K: k, Ops: p, Queue: true, Leave: p.Leave,
		Call: func(token, member string, queued bool, cfg lockConfig) protocol.Call {
			a := p.LockArgs(token, cfg.TTL, 0, member, queued, placeTTL(cfg, member), fair)
			if labels && cfg.Label != "" { // the hold written with its label (lock.lua's ARGV[11])
				a.Labelled, a.Tail = true, protocol.HoldTail(cfg.Label, "", false)
			}
			return a.Acquire(p.K)
		}},
		handle: opts, handOff: true, takes: backend.OptQueueTTL, labelled: labels}
}

// mutexKind is what Inspect, Locks and ForceUnlock know of a Mutex (and
// a FairMutex: the same keys).
var mutexKind = kindSpec{primitive: "Mutex", keys: protocol.MutexKind, queue: true, plain: true, fill: mutexHolders,
	force: func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply {
		if !c.caps.Directed { // script-free: a plain key
			return plainForce(ctx, c, r, k)
		}
		w := c.wakeTo(k)
		return protocol.ForceArgs{Wake: w, ID: rc.id, ReceiptTTL: rc.ttl}.Call(k).Run(ctx, r)
	}}

// mutexHolders reads a Mutex's hash (an Election's too): each owner
// token's hold count, beside its stamps, the leader's value and the
// waiter a freed lock is kept for.
func mutexHolders(in *inspection) bool {
	info := in.info
	for f, v := range in.fields {
		switch {
		case f == protocol.FieldNext:
			info.KeptFor = v
		case strings.HasPrefix(f, protocol.FieldValue):
			info.Value = v
		case strings.HasPrefix(f, protocol.FieldTaken), strings.HasPrefix(f, protocol.FieldSeq), strings.HasPrefix(f, protocol.FieldFence),
			strings.HasPrefix(f, protocol.FieldLabel):
		default:
			n, _ := strconv.ParseInt(v, 10, 64)
			fence, _ := strconv.ParseInt(in.fields[protocol.FieldFence+f], 10, 64)
			info.Holders = append(info.Holders, Holder{Token: f, Holds: n, Fence: fence,
				Since: in.msAt(in.fields[protocol.FieldTaken+f]), TTL: info.TTL})
		}
	}
	return true
}

// plainForce is ForceUnlock without scripts: it deletes the key if it
// still names the holder it read, so that a copy of the delete that the
// client library sends again (the server may run both) cannot free a
// lock another owner took after the first copy — as a bare DEL's copy
// would. (The WATCH mode's MULTI/DEL/EXEC shares the limit of a plain
// release: see TestPlainSentTwice.)
func plainForce(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys) driver.Reply {
	got := r.Do(ctx, protocol.Keyed("GET", k.Lock))
	if got.Err == nil && got.Val == nil {
		return driver.Reply{Val: int64(0)} // free
	}
	holder, err := got.Text()
	if err != nil {
		return protocol.FailedReply(err)
	}
	return backend.PlainOps(c.be, k).Release(holder, 0, 0).Run(ctx, r)
}
