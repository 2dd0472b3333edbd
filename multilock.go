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
	if ms, ok := oneScript(sorted); ok && !carriesAny(ctx, ms) {
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

// carriesAny reports whether ctx carries a lease of one of ms: the set is
// then taken lock by lock, re-entering that one, rather than by one script
// that would wait for the caller's own hold.
func carriesAny(ctx context.Context, ms []*Mutex) bool {
	return slices.ContainsFunc(ms, func(m *Mutex) bool { return leaseFrom(ctx, m.c, m.k.lock, "") != nil })
}

// oneScript returns the lockers as mutexes when one script can take them
// all: plain mutexes of one Client, on a single node.
func oneScript(lockers []Locker) ([]*Mutex, bool) {
	first, ok := lockers[0].(*Mutex)
	if !ok || !first.c.caps.oneScript {
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
// While it waits, it is registered in the queue of the mutex that was
// held, and told like any waiter of it when its turn comes there.
//
// It goes through what acquisition.run does for every other acquire: the
// deployment check, telemetry (span, metrics, the waiting gauge) and the
// owner record for inspectors while it waits.
func lockMutexes(ctx context.Context, ms []*Mutex) (l *Lease, err error) {
	s := &mutexSet{c: ms[0].c, ms: ms}
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	c := s.c
	if err := c.checkDeployment(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, waitEnded(s.name, ctx.Err())
		}
		return nil, err
	}
	start := time.Now()
	ctx, span := c.tel.acquireStarted(ctx, "LockAll", s.name, true)
	defer func() { c.tel.acquireEnded(ctx, span, "LockAll", s.name, start, err) }()
	channel := c.wakeTo(ms[0].k).base + c.id
	seen := c.epochs(channel)
	// Without the set, what the attempts may have left is undone in the
	// background, once the last of them can no longer run on the server
	// (see acquisition.run).
	defer func() {
		if s.lease != nil {
			return
		}
		c.undo(ctx, s.after(), func(ctx context.Context) error {
			calls := make([]call, len(ms))
			for i, m := range ms {
				calls[i] = buryCall(m.k, s.token, s.cfgs[i])
			}
			err0 := firstErr(runBatch(ctx, c.rdb, calls, replicaSync{}))
			var err error
			if s.unknown {
				err = cleanupSet(ctx, c, ms, s.token)
			}
			return errors.Join(err0, err, s.leave(ctx))
		})
	}()
	done, next, err := s.attempt(ctx)
	if done || err != nil {
		return s.lease, err
	}
	c.announce(ctx) // inspectors can tell who waits
	c.tel.waiting("LockAll", s.name, 1)
	defer c.tel.waiting("LockAll", s.name, -1)
	err = c.waitLoop(ctx, s.name, channel, s.token, seen, s.bound(next),
		func(ctx context.Context, _ string) (bool, time.Duration, error) {
			done, next, err := s.attempt(ctx)
			return done || err != nil, s.bound(next), err
		})
	return s.lease, err
}

// mutexSet is one LockAll of mutexes by one script.
type mutexSet struct {
	c         *Client
	ms        []*Mutex
	name      string // the names, joined, for errors
	token     string
	member    string // its registration as a waiter
	keepAlive time.Duration
	cfgs      []lockConfig
	keys      []string
	args      []any
	lease     *Lease // the set's, once taken
	unsettled
}

// prepare checks the call and each mutex's options, and builds the
// script's keys and arguments.
func (s *mutexSet) prepare(ctx context.Context) error {
	names := make([]string, len(s.ms))
	for i, m := range s.ms {
		names[i] = m.k.name
	}
	s.name = strings.Join(names, ", ")
	if err := checkCall(ctx, s.c, s.name); err != nil {
		return err
	}
	s.token = s.c.newToken()
	s.member = s.c.member(s.token, 0)
	var place time.Duration
	for _, m := range s.ms {
		if m.k.name == "" {
			return invalid("empty lock name")
		}
		cfg := defaultLock.with(m.opts)
		if err := cfg.validate(); err != nil {
			return err
		}
		if err := cfg.refuse("Mutex", optQueueTTL); err != nil {
			return err
		}
		s.cfgs = append(s.cfgs, cfg)
		s.keys = append(s.keys, m.k.lock, m.k.fence, m.k.queue, m.k.alive, m.k.dead)
		place = max(place, cfg.queueTTL)
	}
	s.keepAlive = place / 3
	w := s.c.wakeTo(s.ms[0].k)
	s.args = []any{s.token, s.member, place.Milliseconds(), w.baseArg, w.publishArg}
	for _, cfg := range s.cfgs {
		s.args = append(s.args, cfg.ttl.Milliseconds())
	}
	return nil
}

// bound caps a wait at the keep-alive interval of the set's place.
func (s *mutexSet) bound(d time.Duration) time.Duration { return min(d, s.keepAlive) }

// leave gives up the set's place in the queues.
func (s *mutexSet) leave(ctx context.Context) error {
	calls := make([]call, len(s.ms))
	for i, m := range s.ms {
		calls[i] = mutexProto{m.k, s.c.wakeTo(m.k)}.leave(s.member)
	}
	return firstErr(runBatch(ctx, s.c.rdb, calls, replicaSync{}))
}

// attempt tries to take the whole set at once: done, or how long to wait
// at most before trying again.
func (s *mutexSet) attempt(ctx context.Context) (bool, time.Duration, error) {
	c, ms := s.c, s.ms
	start := time.Now()
	res, err := c.be.grant(ctx, call{lockAllScript, s.keys, s.args, nil}).Int64Slice()
	if err == nil && (len(res) < 1 || (res[0] == replyHeld && len(res) != len(ms)+1) || (res[0] == replyBusy && len(res) != 3)) {
		err = errors.New("unexpected script reply")
	}
	if err != nil {
		s.failed(err)
		if ctx.Err() != nil {
			return false, 0, waitEnded(s.name, ctx.Err())
		}
		return false, 0, redisErr("lock", s.name, err)
	}
	if res[0] == replyBusy {
		return false, retryAfter(res[2], s.cfgs[res[1]-1].ttl), nil
	}
	parts := make([]*Lease, len(ms))
	for i, m := range ms {
		l, err := c.newLease(ctx, newHold(c, m.k, "Mutex", mutexProto{m.k, c.wakeTo(m.k)}, s.token, res[i+1], s.cfgs[i], start))
		if err != nil {
			// the Client closed: the set is undone (see lockMutexes)
			releaseAll(ctx, parts[:i])
			s.failed(err)
			return false, 0, err
		}
		parts[i] = l
	}
	s.lease = newSet(parts)
	return true, 0, nil
}

// cleanupSet undoes what an attempt with an unknown outcome may have
// taken.
func cleanupSet(ctx context.Context, c *Client, ms []*Mutex, token string) error {
	calls := make([]call, len(ms))
	for i, m := range ms {
		calls[i] = mutexProto{m.k, c.wakeTo(m.k)}.unlock(token, 0, 0)
	}
	return firstErr(runBatch(ctx, c.rdb, calls, replicaSync{}))
}

// releaseAll unlocks leases after a failed LockAll, within undoGrace
// when ctx has ended; a release that cannot be made then goes on in the
// background (see hold.unlock).
func releaseAll(ctx context.Context, leases []*Lease) {
	ctx, cancel := graced(ctx)
	defer cancel()
	for i := len(leases) - 1; i >= 0; i-- {
		_ = leases[i].Unlock(ctx)
	}
}
