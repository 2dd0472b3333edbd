package dlock_test

// The ctx-cancel sweep: every public call that takes a ctx, its ctx
// cancelled at every command the call sends — before the command is sent,
// after the server ran it but before its reply reaches the caller (the
// reply lost to the cancellation), and after its reply came back — and
// at timed instants across the call (every 25 µs over its first 3 ms).
// After each return the call must have returned promptly, and either
// returned what it promised (a lease held in Redis) or an error; a failed
// acquire leaves nothing held or queued in Redis at its return (unless it
// spent its undo grace: then the background's), and everything is free
// once released, within a bound; no goroutine is left behind.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// cancelMode is when a cancelDriver cancels a call's ctx at its k-th
// command.
type cancelMode int

const (
	cancelBefore cancelMode = iota // before the command is sent: it goes with an ended ctx
	cancelLost                     // the server runs it; its reply is lost (the caller sees ctx.Err())
	cancelAfter                    // the server runs it and its reply comes back, after the ctx ended
)

func (m cancelMode) String() string { return [...]string{"before", "lost", "after"}[m] }

// sweepKey marks the ctx of the call under test: only its commands (and
// those it sends with a ctx derived from its own) are counted.
type sweepKey struct{}

// cancelDriver cancels the ctx of the call under test at the k-th command
// the call sends (a Do or a Pipeline round trip is one), as mode says.
// after, if set, is called after each counted command's reply, with its
// number (1 for the first).
type cancelDriver struct {
	driver.Driver
	s *sweep
}

// sweep is one call's cancellation plan and count.
type sweep struct {
	mu      sync.Mutex
	k       int
	mode    cancelMode
	cancel  context.CancelFunc
	n       int  // commands counted
	fired   bool // the ctx was cancelled by the plan
	firedAt time.Time
	after   func(n int)
	// gate, while set, holds back every command not of the call under
	// test (the Client's background: releases left to it, renewals)
	// until reopen: what a call did before it returned is then told
	// apart from what its background did after.
	gate chan struct{}
}

// holdBackground holds the Client's background commands until reopen.
func (s *sweep) holdBackground() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

// reopen lets the background's commands go.
func (s *sweep) reopen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// arm sets the plan for the next call: cancel at its k-th command.
func (s *sweep) arm(k int, mode cancelMode, cancel context.CancelFunc, after func(int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.k, s.mode, s.cancel, s.after, s.n, s.fired, s.firedAt = k, mode, cancel, after, 0, false, time.Time{}
}

// count reports the commands counted since arm and whether the plan fired.
func (s *sweep) count() (int, bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.fired, s.firedAt
}

// next counts a command of ctx's and says whether the plan fires at it.
func (s *sweep) next(ctx context.Context) (n int, fire bool, mode cancelMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Value(sweepKey{}) == nil {
		if gate := s.gate; gate != nil {
			// Held back while the call under test runs; bounded, so that
			// a call that waits for its Client's background cannot hang
			// (it then shows as a slow return).
			s.mu.Unlock()
			select {
			case <-gate:
			case <-time.After(2 * time.Second):
			}
			s.mu.Lock()
		}
		return 0, false, 0
	}
	s.n++
	if s.n == s.k && s.cancel != nil {
		return s.n, true, s.mode
	}
	return s.n, false, 0
}

func (s *sweep) fire() {
	s.mu.Lock()
	cancel := s.cancel
	s.fired, s.firedAt = true, time.Now()
	s.mu.Unlock()
	cancel()
}

func (s *sweep) done(n int) {
	s.mu.Lock()
	after := s.after
	s.mu.Unlock()
	if after != nil && n > 0 {
		after(n)
	}
}

// round runs one round trip (send) of ctx's under the plan.
func (s *sweep) round(ctx context.Context, errs func(error) []driver.Reply, send func(ctx context.Context) []driver.Reply) []driver.Reply {
	n, fire, mode := s.next(ctx)
	if !fire {
		r := send(ctx)
		s.done(n)
		return r
	}
	switch mode {
	case cancelBefore:
		s.fire()
		r := send(ctx)
		s.done(n)
		return r
	case cancelLost:
		send(context.WithoutCancel(ctx))
		s.fire()
		s.done(n)
		return errs(ctx.Err())
	default:
		r := send(context.WithoutCancel(ctx))
		s.fire()
		s.done(n)
		return r
	}
}

func (d cancelDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	return d.s.round(ctx,
		func(err error) []driver.Reply { return []driver.Reply{{Err: err}} },
		func(ctx context.Context) []driver.Reply { return []driver.Reply{d.Driver.Do(ctx, c)} })[0]
}

func (d cancelDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	return d.s.round(ctx,
		func(err error) []driver.Reply {
			out := make([]driver.Reply, len(cmds))
			for i := range out {
				out[i].Err = err
			}
			return out
		},
		func(ctx context.Context) []driver.Reply { return d.Driver.Pipeline(ctx, cmds) })
}

func (d cancelDriver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	return d.Driver.Dedicated(ctx, key, func(c driver.Conn) error { return fn(cancelConn{c, d.s}) })
}

func (d cancelDriver) Masters(ctx context.Context) ([]driver.Driver, error) {
	ms, err := d.Driver.Masters(ctx)
	for i, m := range ms {
		ms[i] = cancelDriver{m, d.s}
	}
	return ms, err
}

type cancelConn struct {
	driver.Conn
	s *sweep
}

func (c cancelConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	return c.s.round(ctx,
		func(err error) []driver.Reply {
			out := make([]driver.Reply, len(cmds))
			for i := range out {
				out[i].Err = err
			}
			return out
		},
		func(ctx context.Context) []driver.Reply { return c.Conn.Pipeline(ctx, cmds) })
}

// sweptClient returns a Client whose calls made with a ctx marked by
// sweepKey are swept by s.
func sweptClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *sweep) {
	t.Helper()
	s := &sweep{}
	c := seamClient(t, func(d driver.Driver) driver.Driver { return cancelDriver{d, s} }, opts...)
	return c, s
}

// sweepCtx returns the ctx of a swept call, and its cancel.
func sweepCtx() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithValue(context.Background(), sweepKey{}, true))
}

// holders returns the owner tokens that hold the lock hash key now (the
// fields of a Mutex's, FairMutex's or Election's hash that are tokens).
func hashHolders(t *testing.T, admin *redis.Client, key string) []string {
	t.Helper()
	h, err := lockFields(context.Background(), admin, key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for f := range h {
		if f != "@next" && (len(f) < 2 || f[1] != ':') {
			out = append(out, f)
		}
	}
	return out
}

// TestCampaignCancelledReleasesBeforeReturn: a Campaign whose ctx is
// cancelled at any command it sends — the hand-off from a resigning
// leader included, after which it records its value — leaves, when it
// returns an error, no trace of its win: Leader does not report its
// value, and the election's lock is not held by it, at the moment
// Campaign returns (the server answers: the release is made before the
// return, as Campaign's doc says), not later in the background.
func TestCampaignCancelledReleasesBeforeReturn(t *testing.T) {
	ctx := context.Background()
	lc := client(t)
	admin := newRedis(t, srv)
	cc, s := sweptClient(t)
	lock := func(name string) string { l, _, _ := electionKeys(name); return l }
	var cases, leftValue, leftHeld, won, graceSpent int
	// The Client's first call waits for its fence fold, made in the
	// background: done here, before the background is ever held.
	_ = campaign(t, cc.Election(lockName(t)), "warm").Resign(ctx)
	for k := 1; ; k++ {
		reached := false
		for _, mode := range []cancelMode{cancelBefore, cancelLost, cancelAfter} {
			name := lockName(t)
			leader := campaign(t, lc.Election(name), "leader")
			leaderTok := hashHolders(t, admin, lock(name))[0]
			var resign sync.Once
			resigned := make(chan struct{})
			cctx, cancel := sweepCtx()
			s.arm(k, mode, cancel, func(n int) {
				// the candidate's first attempt is back: it waits now (or
				// gave up); the leader resigns and hands it the lock
				resign.Do(func() {
					go func() { defer close(resigned); _ = leader.Resign(ctx) }()
				})
			})
			s.holdBackground()
			ld, err := cc.Election(name).Campaign(cctx, "candidate")
			returned := time.Now()
			n, fired, firedAt := s.count()
			cases++
			if fired {
				reached = true
			}
			if err == nil {
				won++
				held := hashHolders(t, admin, lock(name))
				if len(held) != 1 {
					t.Errorf("k=%d %v: Campaign won, but the lock's holders are %v", k, mode, held)
				}
				s.reopen()
				_ = ld.Resign(ctx)
			} else if fired && returned.Sub(firedAt) >= undoGrace {
				// It spent its grace giving the lock back (this machine
				// was slow): the rest is the background's, as documented.
				graceSpent++
			} else {
				info, lerr := lc.Election(name).Leader(ctx)
				if lerr == nil && info.Value == "candidate" {
					leftValue++
					t.Errorf("k=%d %v (%d commands): Campaign returned %v, but Leader reads its value at the return", k, mode, n, err)
				}
				if held := hashHolders(t, admin, lock(name)); slices.ContainsFunc(held, func(h string) bool { return h != leaderTok }) {
					leftHeld++
					t.Errorf("k=%d %v (%d commands): Campaign returned %v, but the lock is still held at the return (holders %v)", k, mode, n, err, held)
				}
			}
			s.reopen()
			cancel()
			resign.Do(func() { close(resigned) })
			<-resigned
			_ = leader.Resign(ctx)
			// Once the background had its time nothing is left.
			waitFree(t, admin, lock(name))
		}
		if !reached {
			break
		}
	}
	t.Logf("%d cancelled Campaigns: %d won, %d left their value readable, %d left the lock held at the return (%d returned after their undo grace, not checked)",
		cases, won, leftValue, leftHeld, graceSpent)
}

// waitFree waits, within a bound, for key to be gone from Redis.
func waitFree(t *testing.T, admin *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for admin.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			h, _ := lockFields(context.Background(), admin, key)
			t.Fatalf("%s still in Redis 5 s after the call returned: %v", key, h)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sweepEnv is one case of the sweep: a fresh lock name, the swept Client
// (cc) and another (oc), and what the case's setup took.
type sweepEnv struct {
	name, name2 string
	cc, oc      *dlock.Client
	blocker     *dlock.Lease      // oc's: makes the call wait; released after its first command
	lease       *dlock.Lease      // cc's: the lease a Lease call works on
	ld          *dlock.Leadership // cc's: the leadership a Leadership call works on
	oldLd       *dlock.Leadership // oc's: the leader a Campaign waits for
	got         *dlock.Lease      // what the call returned
	gotLd       *dlock.Leadership
}

// sweepCall is one public call that takes a ctx.
type sweepCall struct {
	name  string
	locks func(e *sweepEnv) []sweepLock // what it touches, to be free at the end
	setup func(t *testing.T, e *sweepEnv)
	// release, if set, lets the call through: run after its first
	// command's reply (the blocker's Unlock, a count-down).
	release func(e *sweepEnv)
	call    func(ctx context.Context, e *sweepEnv) error
	// acquire: the call takes something; when it fails nothing of it
	// may be held, or queued, in Redis at its return.
	acquire bool
	// holds, if set, is the hold count Redis should show for e.lease's
	// token at the return, given the call's error (a re-entry, an inner
	// Unlock). A mismatch is counted and logged, not failed: the hold's
	// code is another fix's (issue 33, "Smaller").
	holds func(err error) int64
	// frees: the call gives the lock up (Unlock, Resign); whether it is
	// still held at the return — its release left to the background —
	// is counted and logged: Lease.Unlock's doc promises the background
	// release, not one before the return.
	frees bool
}

// sweepLock is one lock a case touches.
type sweepLock struct {
	kind dlock.Kind
	name string
}

func oneLock(kd dlock.Kind) func(e *sweepEnv) []sweepLock {
	return func(e *sweepEnv) []sweepLock { return []sweepLock{{kd, e.name}} }
}

// sweepCalls are the calls the sweep cancels.
func sweepCalls(t *testing.T) []sweepCall {
	bg := context.Background()
	must := func(l *dlock.Lease, err error) *dlock.Lease {
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	unblock := func(e *sweepEnv) {
		if e.blocker != nil {
			_ = e.blocker.Unlock(bg)
		}
		if e.oldLd != nil {
			_ = e.oldLd.Resign(bg)
		}
	}
	acquire := func(name string, kd dlock.Kind, block func(e *sweepEnv) *dlock.Lease, take func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error)) sweepCall {
		c := sweepCall{name: name, locks: oneLock(kd), acquire: true,
			call: func(ctx context.Context, e *sweepEnv) (err error) { e.got, err = take(ctx, e); return err }}
		if block != nil {
			c.setup = func(t *testing.T, e *sweepEnv) { e.blocker = block(e) }
			c.release = unblock
		}
		return c
	}
	mutexBlock := func(e *sweepEnv) *dlock.Lease { return must(e.oc.Mutex(e.name).Lock(bg)) }
	fairBlock := func(e *sweepEnv) *dlock.Lease { return must(e.oc.FairMutex(e.name).Lock(bg)) }
	readBlock := func(e *sweepEnv) *dlock.Lease { return must(e.oc.RWMutex(e.name).RLock(bg)) }
	writeBlock := func(e *sweepEnv) *dlock.Lease { return must(e.oc.RWMutex(e.name).Lock(bg)) }
	semBlock := func(e *sweepEnv) *dlock.Lease { return must(e.oc.Semaphore(e.name, 1).Acquire(bg, 1)) }
	ownLease := func(e *sweepEnv) { e.lease = must(e.cc.Mutex(e.name).Lock(bg)) }
	lead := func(t *testing.T, e *sweepEnv) {
		var err error
		if e.ld, err = e.cc.Election(e.name).Campaign(bg, "v"); err != nil {
			t.Fatal(err)
		}
	}
	latchSet := func(t *testing.T, e *sweepEnv) {
		if _, err := e.oc.Latch(e.name).TrySetCount(bg, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	noLocks := func(*sweepEnv) []sweepLock { return nil }
	return []sweepCall{
		acquire("Mutex.Lock", dlock.KindMutex, nil, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.Mutex(e.name).Lock(ctx) }),
		acquire("Mutex.Lock/waits", dlock.KindMutex, mutexBlock, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.Mutex(e.name).Lock(ctx) }),
		acquire("Mutex.TryLock", dlock.KindMutex, nil, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.Mutex(e.name).TryLock(ctx) }),
		{name: "Mutex.Lock/re-entry", locks: oneLock(dlock.KindMutex), acquire: true,
			setup: func(t *testing.T, e *sweepEnv) { ownLease(e) },
			call: func(ctx context.Context, e *sweepEnv) (err error) {
				e.got, err = e.cc.Mutex(e.name).Lock(e.lease.Context(ctx))
				return err
			},
			holds: func(err error) int64 {
				if err != nil {
					return 1
				}
				return 2
			}},
		acquire("FairMutex.Lock/waits", dlock.KindMutex, fairBlock, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.FairMutex(e.name).Lock(ctx) }),
		acquire("FairMutex.TryLock", dlock.KindMutex, nil, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) {
			return e.cc.FairMutex(e.name).TryLock(ctx)
		}),
		acquire("RWMutex.Lock/waits", dlock.KindRWMutex, readBlock, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.RWMutex(e.name).Lock(ctx) }),
		acquire("RWMutex.RLock/waits", dlock.KindRWMutex, writeBlock, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.RWMutex(e.name).RLock(ctx) }),
		acquire("RWMutex.TryLock", dlock.KindRWMutex, nil, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) { return e.cc.RWMutex(e.name).TryLock(ctx) }),
		acquire("Semaphore.Acquire/waits", dlock.KindSemaphore, semBlock, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) {
			return e.cc.Semaphore(e.name, 1).Acquire(ctx, 1)
		}),
		acquire("Semaphore.TryAcquire", dlock.KindSemaphore, nil, func(ctx context.Context, e *sweepEnv) (*dlock.Lease, error) {
			return e.cc.Semaphore(e.name, 1).TryAcquire(ctx, 1)
		}),
		{name: "LockAll/waits", acquire: true,
			locks: func(e *sweepEnv) []sweepLock {
				return []sweepLock{{dlock.KindMutex, e.name}, {dlock.KindRWMutex, e.name2}}
			},
			setup: func(t *testing.T, e *sweepEnv) { e.blocker = mutexBlock(e) }, release: unblock,
			call: func(ctx context.Context, e *sweepEnv) (err error) {
				e.got, err = dlock.LockAll(ctx, e.cc.Mutex(e.name), e.cc.RWMutex(e.name2).RLocker())
				return err
			}},
		{name: "Election.Campaign/waits", acquire: true, locks: oneLock(dlock.KindElection),
			setup: func(t *testing.T, e *sweepEnv) {
				var err error
				if e.oldLd, err = e.oc.Election(e.name).Campaign(bg, "old"); err != nil {
					t.Fatal(err)
				}
			}, release: unblock,
			call: func(ctx context.Context, e *sweepEnv) (err error) {
				e.gotLd, err = e.cc.Election(e.name).Campaign(ctx, "new")
				return err
			}},
		{name: "Lease.Unlock", locks: oneLock(dlock.KindMutex), setup: func(t *testing.T, e *sweepEnv) { ownLease(e) }, frees: true,
			call: func(ctx context.Context, e *sweepEnv) error { return e.lease.Unlock(ctx) }},
		{name: "Lease.Extend", locks: oneLock(dlock.KindMutex), setup: func(t *testing.T, e *sweepEnv) { ownLease(e) },
			call: func(ctx context.Context, e *sweepEnv) error { return e.lease.Extend(ctx, time.Minute) }},
		{name: "Lease.TTL", locks: oneLock(dlock.KindMutex), setup: func(t *testing.T, e *sweepEnv) { ownLease(e) },
			call: func(ctx context.Context, e *sweepEnv) error { _, err := e.lease.TTL(ctx); return err }},
		{name: "Lease.Unlock/inner", locks: oneLock(dlock.KindMutex),
			setup: func(t *testing.T, e *sweepEnv) {
				ownLease(e)
				e.got = must(e.cc.Mutex(e.name).Lock(e.lease.Context(bg)))
			},
			call:  func(ctx context.Context, e *sweepEnv) error { return e.got.Unlock(ctx) },
			holds: func(error) int64 { return 1 }},
		{name: "Leadership.Resign", locks: oneLock(dlock.KindElection), setup: lead, frees: true,
			call: func(ctx context.Context, e *sweepEnv) error { return e.ld.Resign(ctx) }},
		{name: "Leadership.Proclaim", locks: oneLock(dlock.KindElection), setup: lead,
			call: func(ctx context.Context, e *sweepEnv) error { return e.ld.Proclaim(ctx, "w") }},
		{name: "Election.Leader", locks: oneLock(dlock.KindElection), setup: lead,
			call: func(ctx context.Context, e *sweepEnv) error { _, err := e.cc.Election(e.name).Leader(ctx); return err }},
		{name: "Client.Inspect", locks: oneLock(dlock.KindMutex), setup: func(t *testing.T, e *sweepEnv) { e.blocker = mutexBlock(e) },
			call: func(ctx context.Context, e *sweepEnv) error {
				_, err := e.cc.Inspect(ctx, dlock.KindMutex, e.name)
				return err
			}},
		{name: "Latch.TrySetCount", locks: noLocks,
			call: func(ctx context.Context, e *sweepEnv) error {
				_, err := e.cc.Latch(e.name).TrySetCount(ctx, 2, time.Minute)
				return err
			}},
		{name: "Latch.CountDown", locks: noLocks, setup: latchSet,
			call: func(ctx context.Context, e *sweepEnv) error { _, err := e.cc.Latch(e.name).CountDown(ctx); return err }},
		{name: "Latch.CountDownOnce", locks: noLocks, setup: latchSet,
			call: func(ctx context.Context, e *sweepEnv) error {
				_, err := e.cc.Latch(e.name).CountDownOnce(ctx, "me")
				return err
			}},
		{name: "Latch.Count", locks: noLocks, setup: latchSet,
			call: func(ctx context.Context, e *sweepEnv) error { _, err := e.cc.Latch(e.name).Count(ctx); return err }},
		{name: "Latch.Wait", locks: noLocks, setup: latchSet,
			release: func(e *sweepEnv) { _, _ = e.oc.Latch(e.name).CountDown(bg) },
			call:    func(ctx context.Context, e *sweepEnv) error { return e.cc.Latch(e.name).Wait(ctx) }},
	}
}

// promptBound is how soon after its ctx ended a call must have returned:
// far above the documented 50 ms, so that a loaded machine does not fail
// it; a call that waits on regardless (a wait that ignores its ctx, a
// command not bounded by it) is caught all the same.
const promptBound = time.Second

// undoGrace is the library's (release.go): how long a call whose ctx has
// ended may still spend undoing what it left in Redis before it leaves
// that to the background. A call that returned sooner than this after
// its cancel must have left nothing: its undo was answered in time.
const undoGrace = 20 * time.Millisecond

// The timed part of the sweep cancels each call at every sweepStep from
// 0 to sweepSpan after it began: a call takes about a millisecond here
// (a few under -race), a waiting one a little longer.
const (
	sweepStep = 25 * time.Microsecond
	sweepSpan = 3 * time.Millisecond
)

// TestCancelSweep cancels the ctx of every public call that takes one at
// each command the call sends — before it is sent, with its reply lost,
// after its reply — and checks after each return: it returned promptly;
// an acquire either returned a lease that is held, or an error, with
// nothing of it held or queued in Redis at its return (the server
// answers: the undo is made before the return); whatever the call, once
// everything is released the locks it touched are free within a bound
// (a release left to the background has had its short time); no
// goroutine is left once the Clients are closed.
func TestCancelSweep(t *testing.T) {
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")}
	bg := context.Background()
	s := &sweep{}
	crdb, ordb := srv.Client(), srv.Client()
	d := seamDriver(t, crdb)
	cc, err := dlock.NewWithDriver(cancelDriver{d, s})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := envdriver.New(ordb)
	if err != nil {
		t.Fatal(err)
	}
	// The Clients' first calls wait for the fence fold, made in the
	// background: done before the background is ever held back.
	warm, err := cc.Mutex(lockName(t)).Lock(bg)
	if err != nil {
		t.Fatal(err)
	}
	ccID := warm.Token()[:16]
	_ = warm.Unlock(bg)
	if l, err := oc.Mutex(lockName(t)).Lock(bg); err == nil {
		_ = l.Unlock(bg)
	}

	type tally struct{ cases, fired, leases, errs, slow, leftAtReturn, graceSpent, countOff, heldAtReturn int }
	var slowest time.Duration
	// one runs a case of sc: k > 0 cancels at its k-th command as mode
	// says; k == 0 cancels after delay (a timer, whatever the call is
	// doing then). It reports whether the ctx was cancelled before the
	// call returned.
	one := func(sc sweepCall, tl *tally, k int, mode cancelMode, delay time.Duration) bool {
		e := &sweepEnv{name: lockName(t), name2: lockName(t), cc: cc, oc: oc}
		if sc.setup != nil {
			sc.setup(t, e)
		}
		ctx, cancel := sweepCtx()
		defer cancel()
		var once sync.Once
		s.arm(k, mode, cancel, func(int) {
			if sc.release != nil {
				once.Do(func() { go sc.release(e) })
			}
		})
		var timedAt atomic.Pointer[time.Time]
		where := fmt.Sprintf("%s k=%d %v", sc.name, k, mode)
		if k == 0 {
			where = fmt.Sprintf("%s cancelled after %v", sc.name, delay)
			tm := time.AfterFunc(delay, func() {
				now := time.Now()
				timedAt.Store(&now)
				cancel()
			})
			defer tm.Stop()
		}
		s.holdBackground()
		callErr := sc.call(ctx, e)
		returned := time.Now()
		n, fired, firedAt := s.count()
		if at := timedAt.Load(); at != nil && at.Before(returned) {
			fired, firedAt = true, *at
		}
		where += fmt.Sprintf(" (%d commands)", n)
		tl.cases++
		if fired {
			tl.fired++
			if late := returned.Sub(firedAt); late > promptBound {
				tl.slow++
				t.Errorf("%s: returned %v after its ctx ended", where, late.Round(time.Millisecond))
			} else {
				slowest = max(slowest, late)
			}
		}
		if callErr == nil {
			tl.leases++
		} else {
			tl.errs++
		}
		switch {
		case !sc.acquire:
		case callErr == nil && e.got != nil && e.got.Err() != nil:
			t.Errorf("%s: returned a lease that has ended: %v", where, e.got.Err())
		case callErr == nil && e.gotLd != nil && e.gotLd.Err() != nil:
			t.Errorf("%s: returned a leadership that has ended: %v", where, e.gotLd.Err())
		case callErr == nil:
			// What it returned is held in Redis.
			for _, l := range sc.locks(e) {
				info, err := oc.Inspect(bg, l.kind, l.name)
				if err != nil {
					t.Fatal(err)
				}
				held := false
				for _, h := range info.Holders {
					if e.got != nil {
						for _, part := range e.got.Parts() { // a LockAll's locks, or the lease
							held = held || h.Token == part.Token()
						}
					}
				}
				if e.gotLd != nil {
					held = info.Held && info.Value == "new" && info.Fence == e.gotLd.Term()
				}
				if !held {
					t.Errorf("%s: returned a lease, but Redis does not show it held: %+v", where, info)
				}
			}
		case callErr != nil && fired && returned.Sub(firedAt) >= undoGrace:
			// The call spent its grace undoing (this machine or Redis was
			// slow): what was left goes on in the background, as
			// documented. Counted; the bounded wait below still applies.
			tl.graceSpent++
		case callErr != nil:
			// Nothing of the call's Client in Redis at the return, but
			// what the case itself holds (e.lease: a re-entry's outer
			// lease).
			for _, l := range sc.locks(e) {
				info, err := oc.Inspect(bg, l.kind, l.name)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range info.Holders {
					if strings.HasPrefix(h.Token, ccID) && (e.lease == nil || h.Token != e.lease.Token()) {
						tl.leftAtReturn++
						t.Errorf("%s: returned %v, but its Client holds %s %q at the return", where, callErr, l.kind, l.name)
					}
				}
				for _, w := range info.Waiters {
					if strings.HasPrefix(w.Token, ccID) {
						tl.leftAtReturn++
						t.Errorf("%s: returned %v, but its Client waits in %s %q at the return", where, callErr, l.kind, l.name)
					}
				}
			}
		}
		if sc.frees {
			for _, l := range sc.locks(e) {
				if info, err := oc.Inspect(bg, l.kind, l.name); err != nil {
					t.Fatal(err)
				} else if info.Held {
					tl.heldAtReturn++
				}
			}
		}
		if sc.holds != nil && e.lease.Err() == nil {
			info, err := oc.Inspect(bg, dlock.KindMutex, e.name)
			if err != nil {
				t.Fatal(err)
			}
			want := sc.holds(callErr)
			for _, h := range info.Holders {
				if h.Token == e.lease.Token() && h.Holds != want {
					tl.countOff++
					t.Logf("%s: returned %v; the hold count in Redis is %d at the return, want %d", where, callErr, h.Holds, want)
				}
			}
		}
		s.reopen()
		cancel()
		once.Do(func() {})
		// Release all that is known; the locks must then be free once the
		// background had its short time.
		if sc.release != nil {
			sc.release(e)
		}
		for _, l := range []*dlock.Lease{e.got, e.lease, e.blocker} {
			if l != nil {
				_ = l.Unlock(bg)
			}
		}
		for _, ld := range []*dlock.Leadership{e.gotLd, e.ld, e.oldLd} {
			if ld != nil {
				_ = ld.Resign(bg)
			}
		}
		for _, l := range sc.locks(e) {
			sweepWaitFree(t, oc, l, where)
		}
		return fired
	}
	for _, sc := range sweepCalls(t) {
		var tl tally
		// At each command the call sends.
		for k := 1; ; k++ {
			reached := false
			for _, mode := range []cancelMode{cancelBefore, cancelLost, cancelAfter} {
				reached = one(sc, &tl, k, mode, 0) || reached
			}
			if !reached {
				break
			}
		}
		// At instants across the call, whatever it is doing then (a
		// command on its way, a reply being read, a wait, an undo).
		for d := time.Duration(0); d <= sweepSpan; d += sweepStep {
			one(sc, &tl, 0, 0, d)
		}
		t.Logf("%-24s %4d cancels (%3d before the return): %3d succeeded, %3d failed; %d slow, %d left something at the return (%d returned after their undo grace, not checked), %d hold counts off, %d releases left to the background",
			sc.name, tl.cases, tl.fired, tl.leases, tl.errs, tl.slow, tl.leftAtReturn, tl.graceSpent, tl.countOff, tl.heldAtReturn)
	}
	t.Logf("slowest return after a cancel: %v", slowest.Round(time.Microsecond))
	_ = cc.Close()
	_ = oc.Close()
	_ = crdb.Close()
	_ = ordb.Close()
	envdriver.Forget(crdb)
	envdriver.Forget(ordb)
	if err := goleak.Find(ignore...); err != nil {
		t.Errorf("goroutines left behind by the sweep: %v", err)
	}
}

// sweepWaitFree waits, within a bound, until l has no holder and no
// waiter.
func sweepWaitFree(t *testing.T, c *dlock.Client, l sweepLock, where string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := c.Inspect(context.Background(), l.kind, l.name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held && len(info.Waiters) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s %q still held or waited for 5 s after everything was released: holders %+v, waiters %+v",
				where, l.kind, l.name, info.Holders, info.Waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
