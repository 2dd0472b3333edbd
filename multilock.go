package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
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
	if ms, ok := oneScript(sorted); ok {
		return lockMutexes(ctx, ms)
	}
	parts := make([]*Lease, 0, len(sorted))
	for _, l := range sorted {
		lease, err := l.Lock(ctx)
		if err != nil {
			releaseAll(ctx, parts)
			return nil, err
		}
		parts = append(parts, lease)
	}
	return newSet(parts), nil
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

// oneScript returns the lockers as mutexes when one script can take them
// all: plain mutexes of one Client, on a single node.
func oneScript(lockers []Locker) ([]*Mutex, bool) {
	first, ok := lockers[0].(*Mutex)
	if !ok || !first.c.be.oneScript() {
		return nil, false
	}
	ms := make([]*Mutex, len(lockers))
	for i, l := range lockers {
		m, ok := l.(*Mutex)
		if !ok || m.c != first.c {
			return nil, false
		}
		ms[i] = m
	}
	return ms, true
}

// lockMutexes takes a set of mutexes of one Client with lock_all.lua.
func lockMutexes(ctx context.Context, ms []*Mutex) (*Lease, error) {
	c := ms[0].c
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.k.name
	}
	name := strings.Join(names, ", ")
	if err := checkCall(ctx, c, name); err != nil {
		return nil, err
	}
	cfgs := make([]lockConfig, len(ms))
	keys := make([]string, 0, 2*len(ms))
	token := newToken()
	args := []any{token}
	for i, m := range ms {
		if m.k.name == "" {
			return nil, invalid("empty lock name")
		}
		cfgs[i] = defaultLock.with(m.opts)
		if err := cfgs[i].validate(); err != nil {
			return nil, err
		}
		if err := cfgs[i].refuse("Mutex", 0); err != nil {
			return nil, err
		}
		keys = append(keys, m.k.lock, m.k.fence)
		args = append(args, cfgs[i].ttl.Milliseconds())
	}
	var set *Lease
	blocked := 0 // the mutex that was held, to wait on
	attempt := func(ctx context.Context) (bool, time.Duration, error) {
		start := time.Now()
		res, err := c.be.grant(ctx, call{lockAllScript, keys, args}).Int64Slice()
		if err == nil && (len(res) < 1 || (res[0] == replyHeld && len(res) != len(ms)+1) || (res[0] == replyBusy && len(res) != 3)) {
			err = errors.New("unexpected script reply")
		}
		if err != nil {
			cleanupSet(ctx, c, ms, token)
			if ctx.Err() != nil {
				return false, 0, waitEnded(name, ctx.Err())
			}
			return false, 0, redisErr("lock", name, err)
		}
		if res[0] == replyBusy {
			blocked = int(res[1]) - 1
			return false, retryAfter(res[2], cfgs[blocked].ttl), nil
		}
		parts := make([]*Lease, len(ms))
		for i, m := range ms {
			p := mutexProto{m.k, c.publish}
			l, err := c.newLease(ctx, newHold(c, m.k, p, token, res[i+1], cfgs[i], start))
			if err != nil {
				releaseAll(ctx, parts[:i])
				cleanupSet(ctx, c, ms[i:], token)
				return false, 0, err
			}
			parts[i] = l
		}
		set = newSet(parts)
		return true, 0, nil
	}
	done, next, err := attempt(ctx)
	for !done && err == nil {
		// Wait on the lock that was held; then try the whole set again.
		k := ms[blocked].k
		err = c.waitLoop(ctx, name, k.channel, token, 0, next,
			func(ctx context.Context) (bool, time.Duration, error) {
				prev := blocked
				done, next, err = attempt(ctx)
				// Another lock of the set is now the one held: wait on it.
				return done || err != nil || blocked != prev, next, err
			})
	}
	return set, err
}

// cleanupSet undoes what an attempt with an unknown outcome may have
// taken, even if ctx has ended, for a bounded time.
func cleanupSet(ctx context.Context, c *Client, ms []*Mutex, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	calls := make([]call, len(ms))
	for i, m := range ms {
		calls[i] = mutexProto{m.k, c.publish}.unlock(token, 0)
	}
	runBatch(ctx, c.rdb, calls, replicaSync{})
}

// releaseAll unlocks leases after a failed LockAll, even if ctx has ended.
func releaseAll(ctx context.Context, leases []*Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for i := len(leases) - 1; i >= 0; i-- {
		_ = leases[i].Unlock(ctx)
	}
}
