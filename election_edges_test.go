package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The edges etcd's users keep hitting with concurrency.Election, each
// shown not to exist here.

// faultDriver fails, or delays, the commands that carry a marker word
// while it is armed.
type faultDriver struct {
	driver.Driver
	marker string
	armed  *atomic.Bool
	delay  time.Duration // 0: fail the command; else send it this late
}

var errInjected = errors.New("injected fault")

func (d faultDriver) hit(c driver.Command) bool {
	// (a Campaign's attempt carries the value at the end of the hold's
	// tail, after its label: protocol.HoldTail; a Proclaim, the value)
	return d.armed.Load() && slices.ContainsFunc(c.Args, func(a any) bool { s, _ := a.(string); return strings.HasSuffix(s, d.marker) })
}

func (d faultDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	if d.hit(c) {
		if d.delay == 0 {
			return driver.Reply{Err: errInjected}
		}
		time.Sleep(d.delay) // a message that arrives late
	}
	return d.Driver.Do(ctx, c)
}

func (d faultDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if !slices.ContainsFunc(cmds, d.hit) {
		return d.Driver.Pipeline(ctx, cmds)
	}
	out := make([]driver.Reply, len(cmds))
	for i, c := range cmds {
		out[i] = d.Do(ctx, c)
	}
	return out
}

func faultyClient(t *testing.T, marker string, delay time.Duration) (*dlock.Client, *atomic.Bool) {
	t.Helper()
	armed := new(atomic.Bool)
	c := seamClient(t, func(d driver.Driver) driver.Driver { return faultDriver{d, marker, armed, delay} })
	return c, armed
}

// electionLeft reports what of a candidate is left in Redis: the lock's
// hash (held or kept), and places in the queue.
func electionLeft(t *testing.T, admin *redis.Client, name string) int64 {
	lock, queue, alive := electionKeys(name)
	return admin.Exists(context.Background(), lock, queue, alive).Val()
}

// etcd: "Campaign leaves its key behind when it fails". A Campaign whose
// ctx ends while it waits leaves no place in the queue; one that wins
// but cannot record its value gives the lock back.
func TestElectionCampaignThatFailsLeavesNothing(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t, srv)
	t.Run("ctx ends while it waits", func(t *testing.T) {
		name := lockName(t)
		leader := campaign(t, client(t).Election(name), "leader")
		_, queue, _ := electionKeys(name)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := client(t).Election(name).Campaign(cctx, "candidate")
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Campaign: %v; want ErrNotObtained and DeadlineExceeded", err)
		}
		if n := admin.Exists(ctx, queue).Val(); n != 0 {
			t.Fatal("the failed candidate's place is still in the queue")
		}
		if err := leader.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if n := electionLeft(t, admin, name); n != 0 {
			t.Fatalf("%d keys left after the leader resigned", n)
		}
	})
	t.Run("the value cannot be recorded", func(t *testing.T) {
		name := lockName(t)
		c, armed := faultyClient(t, "FAIL-ME", 0)
		armed.Store(true)
		_, err := c.Election(name).Campaign(ctx, "FAIL-ME")
		if !errors.Is(err, errInjected) {
			t.Fatalf("Campaign: %v; want the Redis error", err)
		}
		if n := electionLeft(t, admin, name); n != 0 {
			t.Fatalf("%d keys left by a Campaign that failed after it won", n)
		}
		if _, err := c.Election(name).Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Fatalf("Leader: %v, want ErrNoLeader", err)
		}
	})
}

// etcd: "Resign forgets its state after a failed request", leaving the
// key to its lease. Here a Resign that fails still ends the leadership,
// and the lock is given back as soon as Redis answers again; observers
// then see nobody lead.
func TestElectionResignThatFailsStillResigns(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	lock, _, _ := electionKeys(name)
	c, armed := faultyClient(t, lock, 0) // the release names the lock's key
	ld := campaign(t, c.Election(name), "v")
	obs := client(t).Election(name).Observe(t.Context())
	if info := next(t, obs); info.Term != ld.Term() {
		t.Fatalf("observer's first state %+v", info)
	}
	armed.Store(true)
	if err := ld.Resign(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Resign: %v; want the Redis error", err)
	}
	if !errors.Is(ld.Err(), dlock.ErrUnlocked) {
		t.Fatalf("Err after a failed Resign: %v; want ErrUnlocked", ld.Err())
	}
	if err := ld.Proclaim(ctx, "w"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Proclaim after Resign: %v", err)
	}
	if err := ld.Resign(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("second Resign: %v; want what the first returned", err)
	}
	armed.Store(false) // Redis answers again: the background release goes through
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("after the failed Resign: %+v; want nobody", info)
	}
}

// etcd: "Campaign does not abort when the session is lost": it goes on
// waiting, and may return a leadership already gone. Here a Campaign
// returns an error when its Client closes under it, and never returns a
// leadership whose lease ran out before its value was recorded.
func TestElectionCampaignEndsWithItsLease(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t, srv)
	t.Run("Client closed while waiting", func(t *testing.T) {
		name := lockName(t)
		leader := campaign(t, client(t).Election(name), "leader")
		defer leader.Resign(ctx)
		_, queue, _ := electionKeys(name)
		c := client(t)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Election(name).Campaign(ctx, "candidate")
			errc <- err
		}()
		waitFor(t, "the candidate to queue", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
		_ = c.Close()
		if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("Campaign: %v; want ErrClosed", err)
		}
		if n := admin.ZCard(ctx, queue).Val(); n != 0 {
			t.Fatal("the closed Client's candidate is still queued")
		}
	})
	t.Run("lease lost before the value is recorded", func(t *testing.T) {
		name := lockName(t)
		// The value's write reaches Redis after the fixed lease ran out.
		c, armed := faultyClient(t, "LATE", 400*time.Millisecond)
		armed.Store(true)
		e := c.Election(name, dlock.WithLease(100*time.Millisecond))
		ld, err := e.Campaign(ctx, "LATE")
		if err == nil {
			t.Fatalf("Campaign returned leadership %d whose lease had run out (Err %v)", ld.Term(), ld.Err())
		}
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrLeaseLost) {
			t.Fatalf("Campaign: %v; want ErrNotObtained and ErrLeaseLost", err)
		}
		waitFor(t, "nothing of the candidate left", func() bool { return electionLeft(t, admin, name) == 0 })
		if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Fatalf("Leader: %v, want ErrNoLeader", err)
		}
	})
}

// etcd: "Observe never reports that nobody leads". Shown in
// TestElectionObserve (resign, force-unlock, expiry) and
// TestElectionObserversAcrossProcesses (kill -9); here the first state
// of an election nobody ever led.
func TestElectionObserveReportsNobody(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	obs := client(t).Election(lockName(t)).Observe(ctx)
	if info := next(t, obs); info != (dlock.LeaderInfo{}) {
		t.Fatalf("first state %+v; want the zero LeaderInfo", info)
	}
	cancel()
	if _, ok := <-obs; ok {
		t.Fatal("Observe sent a state after its ctx ended and nothing changed")
	}
}

func TestElectionBadInput(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	var nilE *dlock.Election
	//lint:ignore SA1012 a nil context is the bad input under test
	var nilCtx context.Context
	for what, err := range map[string]error{
		"Campaign nil ctx":     func() error { _, err := c.Election("x").Campaign(nilCtx, "v"); return err }(),
		"Campaign empty name":  func() error { _, err := c.Election("").Campaign(ctx, "v"); return err }(),
		"Campaign nil handle":  func() error { _, err := nilE.Campaign(ctx, "v"); return err }(),
		"Leader nil ctx":       func() error { _, err := c.Election("x").Leader(nilCtx); return err }(),
		"Leader empty name":    func() error { _, err := c.Election("").Leader(ctx); return err }(),
		"Leader nil handle":    func() error { _, err := nilE.Leader(ctx); return err }(),
		"Campaign bad TTL":     func() error { _, err := c.Election("x", dlock.WithTTL(-1)).Campaign(ctx, "v"); return err }(),
		"Inspect unknown kind": func() error { _, err := c.Inspect(ctx, "elections", "x"); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", what, err)
		}
	}
	for what, ch := range map[string]<-chan dlock.LeaderInfo{
		"nil ctx": c.Election("x").Observe(nilCtx), "empty name": c.Election("").Observe(ctx), "nil handle": nilE.Observe(ctx),
	} {
		if _, ok := <-ch; ok {
			t.Errorf("Observe with %s: a state; want the channel closed", what)
		}
	}
	ld := campaign(t, c.Election(lockName(t)), "v")
	if err := ld.Proclaim(nilCtx, "w"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Proclaim nil ctx: %v", err)
	}
	if err := ld.Resign(nilCtx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Resign nil ctx: %v", err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// Deployments that cannot run an election say so.
	plain := client(t, dlock.WithoutScripts())
	if _, err := plain.Election("x").Campaign(ctx, "v"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Campaign WithoutScripts: %v; want ErrUnsupported", err)
	}
	if _, err := plain.Election("x").Leader(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Leader WithoutScripts: %v; want ErrUnsupported", err)
	}
	q := quorumClient(t, []*redis.Client{newRedis(t, srv)})
	if _, err := q.Election("x").Campaign(ctx, "v"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Campaign on a quorum: %v; want ErrUnsupported", err)
	}
}

// An observer is told when it can no longer read the election (Err set,
// once, with the last state), and gets the state again, Err nil, once
// Redis is back.
func TestObserveSaysWhenItIsBlind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redistest.StartT(t, redistest.Options{AOF: true})
	c := newClient(t, newRedis(t, s, func(o *redis.Options) { o.MaxRetries = -1 }))
	name := lockName(t)
	ld, err := c.Election(name, dlock.WithTTL(time.Minute)).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	states := c.Election(name).Observe(ctx)
	next := func(what string) dlock.LeaderInfo {
		t.Helper()
		select {
		case st, ok := <-states:
			if !ok {
				t.Fatalf("%s: the channel closed", what)
			}
			return st
		case <-ctx.Done():
			t.Fatalf("%s: nothing sent", what)
		}
		return dlock.LeaderInfo{}
	}
	if st := next("the first state"); st.Value != "v1" || st.Err != nil {
		t.Fatalf("first state %+v", st)
	}
	// Kill the server once the observer listens (its subscription is
	// confirmed, and it sleeps on its leader's minute-long lease): pub/sub
	// does not say that its connection broke. Before the observer read
	// every few seconds, it was told only when the lease ran out (a loaded
	// machine killed it there now and then; this way 3 of 3).
	waitForSubscribers(t, newRedis(t, s), 1)
	time.Sleep(100 * time.Millisecond) // the confirmation reaches the observer: nothing to wait on
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	st := next("blind")
	if st.Err == nil || st.Value != "v1" || st.Term != ld.Term() {
		t.Fatalf("with Redis gone: %+v; want Err set and the last state", st)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if st := next("back"); st.Err != nil || st.Value != "v1" {
		t.Fatalf("with Redis back: %+v; want the state, Err nil", st)
	}
	cancel()
	for range states {
	}
}

// A Resign in flight ends the leadership for every goroutine that shares
// it at once: once the release has run on the server (another candidate
// may lead), Err is not nil any more, though the Resign's reply has not
// come back yet (it is held back here).
func TestResignInFlightEndsTheLeadershipAtOnce(t *testing.T) {
	ctx := context.Background()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	name := lockName(t)
	for _, kind := range []string{"election", "mutex"} {
		t.Run(kind, func(t *testing.T) {
			var errOf func() error
			var release func() error
			var key string
			switch kind {
			case "election":
				ld, err := c.Election(name).Campaign(ctx, "v")
				if err != nil {
					t.Fatal(err)
				}
				errOf, release, key = ld.Err, func() error { return ld.Resign(ctx) }, keysOf(name).Lock+":election"
			case "mutex":
				l := mustLock(t, c.Mutex(name), ctx)
				errOf, release, key = l.Err, func() error { return l.Unlock(ctx) }, keysOf(name).Lock
			}
			admin := newRedis(t, srv)
			p.SetLatency(time.Second) // every reply, the release's among them
			defer p.SetLatency(0)
			done := make(chan error, 1)
			go func() { done <- release() }()
			waitFor(t, "the release to run on the server", func() bool { return admin.Exists(ctx, key).Val() == 0 })
			select {
			case err := <-done:
				t.Fatalf("the release returned (%v) before its held-back reply", err)
			default:
			}
			if err := errOf(); err == nil {
				t.Fatal("Err is nil while the lock is free on the server (the release's reply not back yet)")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
