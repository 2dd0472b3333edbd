package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/acquisition"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/deadlock"
	"github.com/dlock-go/dlock/internal/kinds"

	"github.com/dlock-go/dlock/internal/protocol"
)

// LockAll acquires every one of lockers, all or nothing, and returns one
// Lease for the set. It waits like Lock for each; when ctx ends or an
// acquire fails, it releases what it took and returns the error (one
// matching ErrNotObtained and ctx.Err() for a wait cut short).
//
// The locks are taken in one order fixed by their keys, whatever the order
// of the arguments, so two callers locking overlapping sets never
// deadlock. When every locker is a Mutex of one Client on a single Redis
// node (not a cluster), the whole set is taken by one script in one round
// trip, and a waiter never holds part of the set while it waits.
//
// The set's lease ends as soon as any of its locks' leases ends: Done
// closes and Err tells why. Unlock releases every lock of the set (also
// after a loss, releasing those still held); Extend and TTL act on all of
// them. Parts returns the leases of the locks, for their own fences.
//
// Any mix of lockers works: Mutex, FairMutex, the write side of an
// RWMutex, or its read side from RLocker. The same lock twice is an error
// matching ErrInvalidArgument.
func LockAll(ctx context.Context, lockers ...Locker) (*Lease, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	if len(lockers) == 0 {
		return nil, invalid("LockAll of no locks")
	}
	sorted := slices.Clone(lockers)
	for i, l := range sorted {
		if l == nil || isNilLocker(l) {
			return nil, invalid("LockAll: locker %d is nil", i)
		}
	}
	slices.SortFunc(sorted, func(a, b Locker) int { return strings.Compare(a.order(), b.order()) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].order() == sorted[i-1].order() {
			return nil, invalid("LockAll: %q is in the set twice", sorted[i].Name())
		}
	}
	if ms, ok := oneScript(sorted); ok && !carriesAny(ctx, ms) {
		return lockMutexes(ctx, ms)
	}
	// One by one: a part's lease may end while the next is waited for (a
	// fixed lease shorter than the wait); valid takes the set again then.
	return valid(ctx, joinNames(sorted), true, func() (*Lease, error) {
		parts := make([]*Lease, 0, len(sorted))
		held := ctx // carries the parts taken so far, for deadlock detection
		for _, l := range sorted {
			lease, err := l.Lock(held)
			if err != nil {
				releaseAll(ctx, parts)
				return nil, err
			}
			parts = append(parts, lease)
			held = holding(held, lease)
		}
		return newSet(parts), nil
	})
}

// joinNames is a set's name: its locks' names, joined.
func joinNames(lockers []Locker) string {
	names := make([]string, len(lockers))
	for i, l := range lockers {
		names[i] = l.Name()
	}
	return strings.Join(names, ", ")
}

// isNilLocker reports a typed nil inside a Locker.
func isNilLocker(l Locker) bool {
	switch l := l.(type) {
	case *Mutex:
		return l == nil || l.c == nil
	case *FairMutex:
		return l == nil || l.m.c == nil
	case *RWMutex:
		return l == nil || l.c == nil
	case readLocker:
		return l.rw == nil || l.rw.c == nil
	}
	return false
}

// carriesAny reports whether ctx carries a lease of one of ms: the set is
// then taken lock by lock, re-entering that one, rather than by one script
// that would wait for the caller's own hold.
func carriesAny(ctx context.Context, ms []*Mutex) bool {
	return slices.ContainsFunc(ms, func(m *Mutex) bool { return leaseFrom(ctx, m.c, m.k.Lock, "") != nil })
}

// oneScript returns the lockers as mutexes when one script can take them
// all: plain mutexes of one Client, on a single node.
func oneScript(lockers []Locker) ([]*Mutex, bool) {
	first, ok := lockers[0].(*Mutex)
	if !ok || !first.c.caps.OneScript {
		return nil, false
	}
	ms := make([]*Mutex, len(lockers))
	for i, l := range lockers {
		m, ok := l.(*Mutex)
		if !ok || m.c != first.c || m.req == nil {
			return nil, false
		}
		ms[i] = m
	}
	return ms, true
}

// lockMutexes takes a set of mutexes of one Client with lock_all.lua, by
// the acquire path of every lock (acquisition), with one attempt that
// takes the whole set. While it waits, it is registered in the queue of
// the mutex that was held, and told like any waiter of it when its turn
// comes there.
func lockMutexes(ctx context.Context, ms []*Mutex) (*Lease, error) {
	c := ms[0].c
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.k.Name
	}
	name := strings.Join(names, ", ")
	if err := checkCall(ctx, c, name); err != nil {
		return nil, err
	}
	return valid(ctx, name, true, func() (*Lease, error) { return lockMutexesOnce(ctx, c, ms, name) })
}

// lockMutexesOnce is one acquisition of lockMutexes, with a token of its
// own.
func lockMutexesOnce(ctx context.Context, c *Client, ms []*Mutex, name string) (*Lease, error) {
	token := c.newToken()
	member := c.member(token, 0, 0)
	a := c.acq.New()
	a.What, a.Name, a.Channel, a.Token = "LockAll", name, c.wakeTo(ms[0].k).Base+c.id, token
	var keys []*protocol.Keys
	var leave []protocol.Call
	var place time.Duration
	for _, m := range ms {
		if m.k.Name == "" {
			return nil, invalid("empty lock name")
		}
		cfg := withOpts(defaultLock, m.opts)
		if err := validLock(cfg); err != nil {
			return nil, err
		}
		if err := cfg.Refuse("Mutex", backend.OptQueueTTL); err != nil {
			return nil, err
		}
		p := m.req.Ops.(kinds.Mutex)
		a.Parts = append(a.Parts, acquisition.Part{Request: &m.req.Request, Held: p, Cfg: cfg})
		leave = append(leave, p.Leave(member))
		keys = append(keys, m.k)
		place = max(place, cfg.QueueTTL)
	}
	a.KeepAlive = place / 3
	a.Leave = func() []protocol.Call { return leave }
	a.Detect = c.detectorFor(ctx, "LockAll", token, func() []deadlock.Lock {
		var fors []deadlock.Lock
		for _, m := range ms {
			fors = append(fors, lockFor(m.req)...)
		}
		return fors
	}, 0, lockConfig{QueueTTL: place})
	w := c.wakeTo(ms[0].k)
	args := protocol.LockAllArgs{Token: token, Member: member, PlaceTTL: place.Milliseconds(), Wake: w}
	for _, p := range a.Parts {
		args.TTLs = append(args.TTLs, p.Cfg.TTL.Milliseconds())
	}
	call := args.Call(keys)
	blocked := 0 // the part the last attempt found held (its index + 1)
	a.Attempt = func(ctx context.Context, _, _ bool) (backend.Outcome, error) {
		start := time.Now()
		r := c.be.Grant(ctx, call)
		res, err := r.Int64Slice()
		if err == nil && (len(res) < 1 || (res[0] == protocol.ReplyHeld && len(res) != len(ms)+1) || (res[0] == protocol.ReplyBusy && len(res) != 3)) {
			err = errors.New("unexpected script reply")
		}
		if err != nil {
			return backend.Outcome{SentTwice: r.SentTwice}, redisErr("lock", name, err)
		}
		if res[0] == protocol.ReplyBusy {
			blocked = int(res[1])
			return backend.Outcome{Wait: backend.RetryAfter(res[2], a.Parts[res[1]-1].Cfg.TTL), SentTwice: r.SentTwice}, nil
		}
		return backend.Outcome{Granted: true, Fences: res[1:], Start: start, SentTwice: r.SentTwice}, nil
	}
	hs, err := a.Run(ctx, true)
	if err != nil {
		if blocked > 0 { // who holds the part that kept the set waiting
			err = c.busy(ctx, KindMutex, ms[blocked-1].k.Name, token, err)
		}
		return nil, err
	}
	for i, p := range a.Parts {
		c.label(ctx, ms[i].k, token, p.Cfg.Label)
	}
	return newSet(leasesOf(hs)), nil
}
