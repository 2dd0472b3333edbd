package dlock_test

// The ctx-cancel sweep: every public call that takes a ctx, its ctx
// cancelled at every command the call sends — before the command is sent,
// after the server ran it but before its reply reaches the caller (the
// reply lost to the cancellation), and after its reply came back. After
// each return the call must have returned promptly, and either returned
// what it promised (a lease that is held) or an error with nothing of it
// left held in Redis once the background release had its short time; no
// goroutine is left behind.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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
			s.mu.Unlock()
			<-gate
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

// sweptClient returns a Client whose calls made with a ctx from s.ctx are
// swept by s.
func sweptClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *sweep) {
	t.Helper()
	s := &sweep{}
	rdb := newRedis(t, srv)
	d, err := envdriver.Driver(rdb) // DLOCK_TEST_DRIVER's library, or go-redis
	if err != nil {
		t.Fatal(err)
	}
	if d == nil {
		d = dlock.GoRedisDriver(rdb)
	}
	c, err := dlock.NewWithDriver(cancelDriver{d, s}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
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
	h, err := admin.HGetAll(context.Background(), key).Result()
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
	var cases, leftValue, leftHeld, won int
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
			n, fired, _ := s.count()
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
	t.Logf("%d cancelled Campaigns: %d won, %d left their value readable, %d left the lock held at the return", cases, won, leftValue, leftHeld)
}

// waitFree waits, within a bound, for key to be gone from Redis.
func waitFree(t *testing.T, admin *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for admin.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			h := admin.HGetAll(context.Background(), key).Val()
			t.Fatalf("%s still in Redis 5 s after the call returned: %v", key, h)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = errors.Is
var _ = fmt.Sprint
var _ = goleak.IgnoreCurrent
