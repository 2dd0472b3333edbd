package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// Who holds it. An acquire refused (a TryLock that found the lock held, a
// Lock whose ctx ended while it waited) says who holds the lock, through
// a *BusyError: one read of the lock (as Inspect reads it: its hold, its
// holders' fences, labels, since and TTLs, and their Clients' owner
// records, which ownerCache keeps) that follows the refusal only. The
// uncontended path, and a waiting Lock's attempts, read nothing more: the
// read is made once, when the acquire has already failed. (The refusal
// replies of the acquire scripts are unchanged: a holder carried in them
// would cost every waiting attempt its reads, pinned by
// TestHandOffServerCommands, and the owner record, in another slot, would
// need this read all the same.)

// busyGrace bounds the read of a Lock whose ctx ended: it is made after
// the end, as the acquire's undo is (hold.Graced), within this much more.
const busyGrace = 10 * time.Millisecond

// kindOfWhat maps a primitive (backend.Request.What) to the kind Inspect reads.
func kindOfWhat(what string) Kind {
	switch what {
	case "RWMutex":
		return KindRWMutex
	case "Semaphore":
		return KindSemaphore
	case "Election":
		return KindElection
	}
	return KindMutex
}

// busy turns err, an acquire's refusal on lock name of kind kd by token,
// into a *BusyError naming who holds the lock; any other error, and an
// error that already is one (a LockAll's part), comes back as it is.
// The holders named are all the lock's but token's own (a reader refused
// by a writer finds the writer; a writer refused by readers, the readers).
func (c *Client) busy(ctx context.Context, kd Kind, name, token string, err error) error {
	if !errors.Is(err, ErrNotObtained) {
		return err
	}
	if be := (*BusyError)(nil); errors.As(err, &be) {
		return err
	}
	if errors.Is(err, ErrDeadlock) { // (a *DeadlockError names its cycle)
		return err
	}
	be := &BusyError{Kind: kd, Name: name, err: err}
	if c.rdb == nil { // a quorum: its nodes are not inspected
		return be
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), busyGrace)
		defer cancel()
	}
	info, ierr := c.inspect(ctx, kd, name, &c.owners)
	if ierr != nil {
		return be
	}
	for _, h := range info.Holders {
		if h.Token != token {
			be.Holders = append(be.Holders, h)
		}
	}
	if len(be.Holders) > 0 {
		be.Holder = &be.Holders[0]
	}
	return be
}

// labels reports whether the Client records labels: one deployment with
// scripts (not WithoutScripts, not a quorum).
func (c *Client) labels() bool { return c.rdb != nil && c.caps.All }

// label records label with the hold of token on k (label.lua), after its
// grant. A failure is logged, not returned: the lease is held all the
// same, without its label.
func (c *Client) label(ctx context.Context, k *protocol.Keys, token, label string) {
	if label == "" || !c.labels() {
		return
	}
	if err := c.be.Run(ctx, protocol.LabelArgs{Token: token, Label: label}.Call(k)).Err; err != nil {
		c.tel.Log.Info("dlock: a hold's label was not recorded", "lock", k.Name, "err", err)
	}
}

// ownerCache keeps the owner records (by Client id) that BusyErrors read
// lately, so that refusals in a row (a TryLock storm, a Lock that gives
// up again and again) read a Client's record once: a record is written
// once per Client (its id is random, and a Client's host, pid, program,
// label and start never change), so a cached one goes stale only when
// its Client closes (its record deleted, or expired): then for
// ownerFresh at most. It holds ownerCacheMax records at most (full, it
// starts again empty). A nil *ownerCache caches nothing.
type ownerCache struct {
	mu sync.Mutex
	m  map[string]cachedOwner
}

type cachedOwner struct {
	o  *Owner // nil: the Client recorded nothing
	at time.Time
}

const (
	ownerFresh    = 10 * time.Second
	ownerCacheMax = 256
)

// get returns the record of Client id, if cached and fresh.
func (oc *ownerCache) get(id string) (*Owner, bool) {
	if oc == nil {
		return nil, false
	}
	oc.mu.Lock()
	defer oc.mu.Unlock()
	e, ok := oc.m[id]
	if !ok || time.Since(e.at) > ownerFresh {
		return nil, false
	}
	if e.o == nil {
		return nil, true
	}
	o := *e.o // a copy: a caller may change what it was given
	return &o, true
}

// put caches the record of Client id (nil: none).
func (oc *ownerCache) put(id string, o *Owner) {
	if oc == nil {
		return
	}
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.m == nil || len(oc.m) >= ownerCacheMax {
		oc.m = make(map[string]cachedOwner)
	}
	oc.m[id] = cachedOwner{o, time.Now()}
}
