package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Attacks on deadlock detection (deadlock_detect.go, internal/deadlock):
// exactly one victim, no false report, no record left behind, a stalled
// server, a user who may not write the records, prefixes kept apart, and
// detection turned off. Each test has a prefix of its own, so that the
// records it finds (<prefix>:wait:*) are its own.

// atkDelay is the WithDeadlockDelay of these tests.
const atkDelay = 100 * time.Millisecond

// atkPrefix is a prefix of the test's own.
func atkPrefix(t *testing.T) string { return "dl-" + lockName(t) }

// atkClient is a Client of prefix p with the tests' delay.
func atkClient(t *testing.T, p string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return client(t, append([]dlock.Option{dlock.WithPrefix(p), dlock.WithDeadlockDelay(atkDelay)}, opts...)...)
}

// waitKeys lists the wait records of prefix p.
func waitKeys(t *testing.T, rdb *redis.Client, p string) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), p+":wait:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// noWaitKeys fails the test if a wait record of p is left.
func noWaitKeys(t *testing.T, rdb *redis.Client, p, when string) {
	t.Helper()
	if ks := waitKeys(t, rdb, p); len(ks) > 0 {
		t.Errorf("%s: wait records left: %v", when, ks)
	}
}

// recorded returns once the wait of the acquire that holds l is recorded.
func recorded(t *testing.T, rdb *redis.Client, p string, l *dlock.Lease) {
	t.Helper()
	waitFor(t, "the wait holding "+l.Name()+" to be recorded", func() bool {
		n, err := rdb.Exists(context.Background(), p+":wait:"+l.Token()).Result()
		return err == nil && n == 1
	})
}

// party is an acquire made through its holds' contexts, in a goroutine:
// when it ends, it releases what it got and its holds, and sends its
// error (nil: it got the lock).
type party struct {
	holds []*dlock.Lease
	done  chan error
	took  time.Duration
}

// wait starts p's acquire, with a ctx of timeout.
func (p *party) wait(t *testing.T, timeout time.Duration, acquire func(ctx context.Context) (*dlock.Lease, error)) *party {
	p.done = make(chan error, 1)
	ctx := context.Background()
	for _, h := range p.holds {
		ctx = h.Context(ctx)
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		l, err := acquire(ctx)
		p.took = time.Since(start)
		if l != nil {
			_ = l.Unlock(context.Background())
		}
		for _, h := range p.holds {
			_ = h.Unlock(context.Background())
		}
		p.done <- err
	}()
	return p
}

// result waits for p's end (10 s at most).
func (p *party) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a party's wait did not end within 10 s")
	}
	return nil
}

func holding(ls ...*dlock.Lease) *party { return &party{holds: ls} }

func lockOf(m dlock.Locker) func(ctx context.Context) (*dlock.Lease, error) {
	return func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
}

func acquireOf(s *dlock.Semaphore, n int) func(ctx context.Context) (*dlock.Lease, error) {
	return func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, n) }
}

// Two cycles share a wait X (X holds x and waits for a semaphore whose
// two permits Y and Z hold, each waiting for x). X youngest: X alone
// gives up, breaking both; X oldest: Z (the youngest) gives up, and its
// permit lets X through: Y never gives up.
func TestDeadlockAttackTwoCyclesShareAWait(t *testing.T) {
	t.Parallel()
	for _, xYoungest := range []bool{true, false} {
		t.Run(fmt.Sprint("xYoungest=", xYoungest), func(t *testing.T) {
			t.Parallel()
			p := atkPrefix(t)
			rdb := newRedis(t, srv)
			cx, cy, cz := atkClient(t, p), atkClient(t, p), atkClient(t, p)
			ctx := context.Background()
			lx := mustLock(t, cx.Mutex("x"), ctx)
			py, err := cy.Semaphore("s", 2).Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			pz, err := cz.Semaphore("s", 2).Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			var X, Y, Z *party
			startX := func() {
				X = holding(lx).wait(t, 5*time.Second, acquireOf(cx.Semaphore("s", 2), 1))
				recorded(t, rdb, p, lx)
			}
			if !xYoungest {
				startX()
			}
			Y = holding(py).wait(t, 5*time.Second, lockOf(cy.Mutex("x")))
			recorded(t, rdb, p, py)
			Z = holding(pz).wait(t, 5*time.Second, lockOf(cz.Mutex("x")))
			recorded(t, rdb, p, pz)
			if xYoungest {
				startX()
			}
			ex, ey, ez := X.result(t), Y.result(t), Z.result(t)
			victim, others := ex, []error{ey, ez}
			if !xYoungest {
				victim, others = ez, []error{ex, ey}
			}
			if !errors.Is(victim, dlock.ErrDeadlock) {
				t.Errorf("the youngest wait did not give up: %v", victim)
			}
			for _, err := range others {
				if err != nil {
					t.Errorf("another wait did not get its lock: %v", err)
				}
			}
			noWaitKeys(t, rdb, p, "all waits ended")
		})
	}
}

// A cycle that forms while its older member checks (it checks every
// delay, finding a chain to a running holder; the younger member closes
// the cycle at a random moment of that): the younger alone gives up,
// every round.
func TestDeadlockAttackCycleFormsDuringCheck(t *testing.T) {
	t.Parallel()
	const delay = 20 * time.Millisecond
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	ca := client(t, dlock.WithPrefix(p), dlock.WithDeadlockDelay(delay))
	cb := client(t, dlock.WithPrefix(p), dlock.WithDeadlockDelay(delay))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 15 {
		a, b := fmt.Sprint("a", round), fmt.Sprint("b", round)
		la := mustLock(t, ca.Mutex(a), ctx)
		lb := mustLock(t, cb.Mutex(b), ctx)
		A := holding(la).wait(t, 5*time.Second, lockOf(ca.Mutex(b)))
		recorded(t, rdb, p, la)
		time.Sleep(time.Duration(rng.Int64N(int64(3 * delay)))) // (a random phase of A's checks, not a signal)
		B := holding(lb).wait(t, 5*time.Second, lockOf(cb.Mutex(a)))
		ea, eb := A.result(t), B.result(t)
		if ea != nil || !errors.Is(eb, dlock.ErrDeadlock) {
			t.Fatalf("round %d: the older wait got %v, the younger %v; want the younger alone to give up", round, ea, eb)
		}
	}
	noWaitKeys(t, rdb, p, "all waits ended")
}

// The victim's ctx ends around the moment it gives up: whichever comes
// first, it alone ends without its lock, within its ctx's bound, the
// other gets its lock, and no record is left.
func TestDeadlockAttackVictimCtxEndsAsItGivesUp(t *testing.T) {
	t.Parallel()
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	ca, cb := atkClient(t, p), atkClient(t, p)
	ctx := context.Background()
	kinds := map[string]int{}
	for round := range 12 {
		a, b := fmt.Sprint("a", round), fmt.Sprint("b", round)
		la := mustLock(t, ca.Mutex(a), ctx)
		lb := mustLock(t, cb.Mutex(b), ctx)
		A := holding(la).wait(t, 5*time.Second, lockOf(ca.Mutex(b)))
		recorded(t, rdb, p, la)
		timeout := atkDelay - 5*time.Millisecond + time.Duration(3*round)*time.Millisecond
		B := holding(lb).wait(t, timeout, lockOf(cb.Mutex(a)))
		ea, eb := A.result(t), B.result(t)
		switch {
		case errors.Is(eb, dlock.ErrDeadlock):
			kinds["deadlock"]++
		case errors.Is(eb, dlock.ErrNotObtained) && errors.Is(eb, context.DeadlineExceeded):
			kinds["ctx"]++
		default:
			t.Fatalf("round %d: the younger wait ended with %v", round, eb)
		}
		if ea != nil {
			t.Fatalf("round %d: the older wait did not get its lock: %v", round, ea)
		}
		if B.took > timeout+300*time.Millisecond {
			t.Errorf("round %d: the younger wait returned %v after its call, its ctx %v", round, B.took, timeout)
		}
		noWaitKeys(t, rdb, p, fmt.Sprintf("round %d", round))
	}
	t.Logf("the younger wait ended: %v", kinds)
}

// No false report: a chain of 8 waits, each holding the lock the one
// before waits for, ends in a holder that runs; then it releases, and
// every wait is served.
func TestDeadlockAttackLongChainNoReport(t *testing.T) {
	t.Parallel()
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	ctx := context.Background()
	const n = 8
	cs := make([]*dlock.Client, n+1)
	ls := make([]*dlock.Lease, n+1)
	kinds := []func(c *dlock.Client, i int) dlock.Locker{
		func(c *dlock.Client, i int) dlock.Locker { return c.Mutex(fmt.Sprint("l", i)) },
		func(c *dlock.Client, i int) dlock.Locker { return c.FairMutex(fmt.Sprint("l", i)) },
		func(c *dlock.Client, i int) dlock.Locker { return c.RWMutex(fmt.Sprint("l", i)) },
	}
	lk := func(i int) dlock.Locker { return kinds[i%len(kinds)](cs[i], i) }
	for i := range cs {
		cs[i] = atkClient(t, p)
	}
	for i := range cs {
		ls[i] = mustLock(t, lk(i), ctx)
	}
	var ps []*party
	for i := n - 1; i >= 0; i-- { // the oldest wait is the one nearest the running holder
		ps = append(ps, holding(ls[i]).wait(t, 8*time.Second, lockOf(kinds[(i+1)%len(kinds)](cs[i], i+1))))
		recorded(t, rdb, p, ls[i])
	}
	deadline := time.Now().Add(5 * atkDelay)
	for time.Now().Before(deadline) {
		s, err := cs[0].Snapshot(ctx, dlock.SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Deadlocks) > 0 {
			t.Fatalf("Snapshot reports a deadlock in a chain: %v", s.Deadlocks[0])
		}
		if len(s.Waits) != n {
			t.Fatalf("%d waits recorded, want %d", len(s.Waits), n)
		}
	}
	unlock(t, ls[n])
	for i, pt := range ps {
		if err := pt.result(t); err != nil {
			t.Errorf("wait %d: %v", i, err)
		}
	}
	noWaitKeys(t, rdb, p, "all waits ended")
}

// No false report through a Semaphore: A holds a permit and waits for m;
// B holds m and waits for a permit. With the other permit held by a
// holder that runs, or free (B queued behind a wait that holds nothing,
// for more than is free), B's wait is not deadlocked as read, and nobody
// gives up.
func TestDeadlockAttackSemaphoreNoReport(t *testing.T) {
	t.Parallel()
	for _, free := range []bool{false, true} {
		t.Run(fmt.Sprint("free=", free), func(t *testing.T) {
			t.Parallel()
			p := atkPrefix(t)
			rdb := newRedis(t, srv)
			ca, cb, cr := atkClient(t, p), atkClient(t, p), atkClient(t, p)
			ctx := context.Background()
			pa, err := ca.Semaphore("s", 2).Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			lm := mustLock(t, cb.Mutex("m"), ctx)
			var other *dlock.Lease
			cctx, cancelC := context.WithCancel(ctx)
			defer cancelC()
			cDone := make(chan error, 1)
			if !free {
				if other, err = cr.Semaphore("s", 2).Acquire(ctx, 1); err != nil {
					t.Fatal(err)
				}
			} else {
				// C holds nothing and asks for both permits: it waits,
				// and B queues behind it with a permit free.
				go func() {
					l, err := cr.Semaphore("s", 2).Acquire(cctx, 2)
					if l != nil {
						_ = l.Unlock(ctx)
					}
					cDone <- err
				}()
				waitFor(t, "C queued", func() bool {
					info, err := cr.Inspect(ctx, dlock.KindSemaphore, "s")
					return err == nil && len(info.Waiters) > 0
				})
			}
			A := holding(pa).wait(t, 5*time.Second, lockOf(ca.Mutex("m")))
			recorded(t, rdb, p, pa)
			B := holding(lm).wait(t, 5*time.Second, acquireOf(cb.Semaphore("s", 2), 1))
			if free {
				time.Sleep(5 * atkDelay) // (B's checks run meanwhile: no signal to wait for)
				cancelC()
				if err := <-cDone; !errors.Is(err, context.Canceled) {
					t.Errorf("C: %v", err)
				}
			} else {
				recorded(t, rdb, p, lm)
				time.Sleep(5 * atkDelay) // (as above)
				unlock(t, other)
			}
			if ea, eb := A.result(t), B.result(t); ea != nil || eb != nil {
				t.Errorf("A got %v, B %v; want both served", ea, eb)
			}
			noWaitKeys(t, rdb, p, "all waits ended")
		})
	}
}

// No false report through a lease that ended: A and B close a cycle,
// then A's hold is force-unlocked and taken by R, a holder that runs,
// before the victim's check; A's record still names its hold until its
// wait ends. The younger (B) must not give up for a cycle that is gone.
func TestDeadlockAttackForceUnlockedHoldNoReport(t *testing.T) {
	t.Parallel()
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	const delay = 400 * time.Millisecond
	ca := client(t, dlock.WithPrefix(p), dlock.WithDeadlockDelay(delay))
	cb := client(t, dlock.WithPrefix(p), dlock.WithDeadlockDelay(delay))
	cr := atkClient(t, p)
	ctx := context.Background()
	la := mustLock(t, ca.Mutex("a"), ctx, dlock.WithTTL(3*time.Second))
	lb := mustLock(t, cb.Mutex("b"), ctx)
	A := holding(la).wait(t, 5*time.Second, lockOf(ca.Mutex("b")))
	recorded(t, rdb, p, la)
	B := holding(lb).wait(t, 5*time.Second, lockOf(cb.Mutex("a")))
	recorded(t, rdb, p, lb)
	// R queues for a first? No: B waits for a already; force-unlock hands
	// a to B or to R, whichever the lock serves. Either way no cycle.
	rDone := make(chan error, 1)
	go func() {
		l, err := cr.Mutex("a").Lock(ctx)
		if err == nil {
			time.Sleep(3 * delay) // R runs while holding
			err = l.Unlock(ctx)
		}
		rDone <- err
	}()
	if _, err := cr.ForceUnlock(ctx, dlock.KindMutex, "a"); err != nil {
		t.Fatal(err)
	}
	eb := B.result(t)
	if errors.Is(eb, dlock.ErrDeadlock) {
		t.Errorf("B gave up for a cycle through a hold that was force-unlocked: %v", eb)
	}
	if eb != nil {
		t.Errorf("B: %v", eb)
	}
	if ea := A.result(t); errors.Is(ea, dlock.ErrDeadlock) {
		t.Errorf("A gave up: %v", ea)
	}
	if err := <-rDone; err != nil {
		t.Errorf("R: %v", err)
	}
	noWaitKeys(t, rdb, p, "all waits ended")
}

// A wait's records are gone when its Lock returns, however it ends: its
// ctx, ErrDeadlock, a won lock, its Client's Close.
func TestDeadlockAttackRecordsNotLeft(t *testing.T) {
	t.Parallel()
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	ctx := context.Background()
	ca, cb := atkClient(t, p), atkClient(t, p)
	la := mustLock(t, ca.Mutex("a"), ctx)
	lb := mustLock(t, cb.Mutex("b"), ctx)

	// by its ctx
	cctx, cancel := context.WithTimeout(la.Context(ctx), 3*atkDelay)
	_, err := ca.Mutex("b").Lock(cctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait for a held lock: %v", err)
	}
	noWaitKeys(t, rdb, p, "a wait ended by its ctx")

	// by ErrDeadlock
	A := holding().wait(t, 5*time.Second, func(context.Context) (*dlock.Lease, error) { return ca.Mutex("b").Lock(la.Context(ctx)) })
	recorded(t, rdb, p, la)
	_, err = cb.Mutex("a").Lock(lb.Context(ctx))
	if !errors.Is(err, dlock.ErrDeadlock) {
		t.Fatalf("the younger of a cycle: %v", err)
	}
	if n, _ := rdb.Exists(ctx, p+":wait:"+lb.Token()).Result(); n != 0 {
		t.Errorf("a wait ended by ErrDeadlock: its record is left")
	}
	unlock(t, lb)
	if err := A.result(t); err != nil { // (won: it got b; the party released it)
		t.Fatal(err)
	}
	noWaitKeys(t, rdb, p, "a wait that won its lock")

	// by its Client's Close, while it waits
	lb = mustLock(t, cb.Mutex("b"), ctx)
	cc := atkClient(t, p)
	lc := mustLock(t, cc.Mutex("c"), ctx)
	C := holding().wait(t, 5*time.Second, func(context.Context) (*dlock.Lease, error) { return cc.Mutex("b").Lock(lc.Context(ctx)) })
	recorded(t, rdb, p, lc)
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := C.result(t); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a wait whose Client closed: %v", err)
	}
	noWaitKeys(t, rdb, p, "a wait whose Client closed")
	unlock(t, lb)
	unlock(t, la)
}

// A killed or stopped process's records expire by their TTL:
// max(3×delay, the queue TTL, 3 s by default).
func TestDeadlockAttackRecordsExpireKilledStopped(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			rdb := newRedis(t, srv)
			ctx := context.Background()
			b := lockName(t)
			c := client(t)
			lb := mustLock(t, c.Mutex(b+"-b"), ctx)
			defer unlock(t, lb)
			h := startHelper(t, "party", addrEnv+"="+srv.Addr(), delayEnv+"=300ms", partyEnv+"=mutex:"+b+"-a>mutex:"+b+"-b")
			h.expect(t, "held", 20*time.Second)
			h.send(t, "go")
			h.expect(t, "waiting", 10*time.Second)
			var key string
			waitFor(t, "the helper's wait recorded", func() bool {
				ks, err := rdb.Keys(ctx, "dlock:wait:*").Result()
				for _, k := range ks {
					if w, _ := rdb.Get(ctx, k).Result(); err == nil && strings.Contains(w, b+"-b") {
						key = k
						return true
					}
				}
				return false
			})
			if err := h.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			if sig == syscall.SIGSTOP {
				defer func() { _ = h.cmd.Process.Signal(syscall.SIGCONT) }()
			}
			const ttl = 3 * time.Second // max(3 × 300 ms, DefaultQueueTTL)
			if pt, err := rdb.PTTL(ctx, key).Result(); err != nil || pt > ttl {
				t.Fatalf("the record's PTTL is %v (%v), want at most %v", pt, err, ttl)
			}
			for {
				n, err := rdb.Exists(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Since(stopped) > ttl+500*time.Millisecond {
					t.Fatalf("the record of a %v process is still there %v later", sig, time.Since(stopped))
				}
				time.Sleep(10 * time.Millisecond) // (polls Redis: the process is gone)
			}
		})
	}
}

// A server that stalls (DEBUG SLEEP) during a wait's checks: its Lock
// returns by its ctx, not after the stall.
func TestDeadlockAttackStallDuringCheck(t *testing.T) {
	t.Parallel()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	ctx := context.Background()
	c := newClient(t, newRedis(t, s), dlock.WithDeadlockDelay(atkDelay))
	other := newClient(t, newRedis(t, s))
	la := mustLock(t, c.Mutex("a"), ctx)
	lb := mustLock(t, other.Mutex("b"), ctx)
	defer func() { _ = lb.Unlock(ctx) }()
	defer func() { _ = la.Unlock(ctx) }()
	for _, at := range []time.Duration{atkDelay - 10*time.Millisecond, atkDelay, atkDelay + 5*time.Millisecond, 2*atkDelay + 2*time.Millisecond} {
		const timeout = 350 * time.Millisecond
		wctx, cancel := context.WithTimeout(la.Context(ctx), timeout)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := c.Mutex("b").Lock(wctx)
			done <- err
		}()
		time.Sleep(at) // (aims the stall at a check: no signal marks one)
		stalled := make(chan error, 1)
		go func() { stalled <- admin.Do(ctx, "DEBUG", "SLEEP", "1.5").Err() }()
		err := <-done
		took := time.Since(start)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("stall at %v: %v", at, err)
		}
		if took > timeout+300*time.Millisecond {
			t.Errorf("stall at %v: Lock returned %v after its call, its ctx %v", at, took, timeout)
		}
		if err := <-stalled; err != nil {
			t.Fatal(err)
		}
	}
}

// A user who may not write <prefix>:wait:* waits as usual, undetected,
// with one warning.
func TestDeadlockAttackACLNoWaitWrites(t *testing.T) {
	t.Parallel()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	ctx := context.Background()
	// every key of the prefix but dlock:wait:*, which is read only
	words := grantWithWaits(t, "")
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER"}, words...)...).Err(); err != nil {
		t.Fatal(err)
	}
	asApp := func(o *redis.Options) { o.Username, o.Password = "app", "secret" }
	var log syncBuf
	logger := slog.New(slog.NewTextHandler(&log, nil))
	ca := newClient(t, newRedis(t, s, asApp), dlock.WithDeadlockDelay(atkDelay), dlock.WithLogger(logger))
	cb := newClient(t, newRedis(t, s, asApp), dlock.WithDeadlockDelay(atkDelay), dlock.WithLogger(logger))
	la := mustLock(t, ca.Mutex("a"), ctx)
	lb := mustLock(t, cb.Mutex("b"), ctx)
	A := holding(la).wait(t, 6*atkDelay, lockOf(ca.Mutex("b")))
	B := holding(lb).wait(t, 6*atkDelay, lockOf(cb.Mutex("a")))
	ea, eb := A.result(t), B.result(t)
	for _, err := range []error{ea, eb} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a wait that cannot record itself ended with %v; want its ctx's end", err)
		}
	}
	if n := strings.Count(log.String(), "could not record itself"); n != 2 {
		t.Errorf("%d warnings that a wait could not record itself (one per wait); log:\n%s", n, log.String())
	}
	// and the lock still works for the user
	l := mustLock(t, ca.Mutex("a"), ctx)
	unlock(t, l)
}

// syncBuf is a bytes.Buffer for several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Another prefix keeps its graph apart: the same names, a cycle in one
// prefix and a chain to a running holder in the other: one victim in the
// first, none in the second, and each Snapshot sees its own waits.
func TestDeadlockAttackPrefixesApart(t *testing.T) {
	t.Parallel()
	p1, p2 := atkPrefix(t), atkPrefix(t)
	rdb := newRedis(t, srv)
	ctx := context.Background()
	a1, b1 := atkClient(t, p1), atkClient(t, p1)
	a2, b2, r2 := atkClient(t, p2), atkClient(t, p2), atkClient(t, p2)
	// p2: a chain A2 (holds a, waits b) -> B2 (holds b, waits c) -> R2 (holds c, runs)
	la2 := mustLock(t, a2.Mutex("a"), ctx)
	lb2 := mustLock(t, b2.Mutex("b"), ctx)
	lc2 := mustLock(t, r2.Mutex("c"), ctx)
	B2 := holding(lb2).wait(t, 5*time.Second, lockOf(b2.Mutex("c")))
	recorded(t, rdb, p2, lb2)
	A2 := holding(la2).wait(t, 5*time.Second, lockOf(a2.Mutex("b")))
	recorded(t, rdb, p2, la2)
	// p1: a cycle on a and b
	la1 := mustLock(t, a1.Mutex("a"), ctx)
	lb1 := mustLock(t, b1.Mutex("b"), ctx)
	A1 := holding(la1).wait(t, 5*time.Second, lockOf(a1.Mutex("b")))
	recorded(t, rdb, p1, la1)
	B1 := holding(lb1).wait(t, 5*time.Second, lockOf(b1.Mutex("a")))
	if err := B1.result(t); !errors.Is(err, dlock.ErrDeadlock) {
		t.Errorf("p1's younger wait: %v", err)
	}
	if err := A1.result(t); err != nil {
		t.Errorf("p1's older wait: %v", err)
	}
	s2, err := a2.Snapshot(ctx, dlock.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Waits) != 2 || len(s2.Deadlocks) != 0 {
		t.Errorf("p2's Snapshot: %d waits (want 2), deadlocks %v (want none)", len(s2.Waits), s2.Deadlocks)
	}
	time.Sleep(3 * atkDelay) // (p2's waits check meanwhile)
	unlock(t, lc2)
	if eb, ea := B2.result(t), A2.result(t); eb != nil || ea != nil {
		t.Errorf("p2's chain: %v, %v; want both served", eb, ea)
	}
	noWaitKeys(t, rdb, p1, "p1")
	noWaitKeys(t, rdb, p2, "p2")
}

// WithoutDeadlockDetection: a cycle's waits write nothing and neither
// gives up before its ctx ends.
func TestDeadlockAttackDetectionOff(t *testing.T) {
	t.Parallel()
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	ctx := context.Background()
	ca := atkClient(t, p, dlock.WithoutDeadlockDetection())
	cb := atkClient(t, p, dlock.WithoutDeadlockDetection())
	la := mustLock(t, ca.Mutex("a"), ctx)
	lb := mustLock(t, cb.Mutex("b"), ctx)
	A := holding(la).wait(t, 5*atkDelay, lockOf(ca.Mutex("b")))
	B := holding(lb).wait(t, 5*atkDelay, lockOf(cb.Mutex("a")))
	deadline := time.Now().Add(4 * atkDelay)
	for time.Now().Before(deadline) {
		noWaitKeys(t, rdb, p, "detection off")
		time.Sleep(10 * time.Millisecond) // (polls Redis)
	}
	for _, err := range []error{A.result(t), B.result(t)} {
		if errors.Is(err, dlock.ErrDeadlock) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a wait with detection off ended with %v; want its ctx's end", err)
		}
	}
	if ks, _ := rdb.Keys(ctx, p+":deadlock:*").Result(); len(ks) > 0 {
		t.Errorf("deadlocks recorded with detection off: %v", ks)
	}
}

// grantWithWaits is the documented grant with every key of the prefix but
// dlock:wait:*, and for those, sel: the ACL selector's commands ("" for
// read only).
func grantWithWaits(t *testing.T, sel string) []any {
	t.Helper()
	var words []any
	for _, w := range documentedGrant(t) {
		if w == "~dlock:*" {
			words = append(words, "~dlock:[^w]*", "~dlock:w[^a]*", "~dlock:wa[^i]*", "~dlock:wai[^t]*", "~dlock:wait[^:]*")
			if sel == "" {
				words = append(words, "%R~dlock:wait:*")
			}
			continue
		}
		words = append(words, w)
	}
	if envdriver.Name() != "go-redis" {
		words = append(words, "+client|tracking", "+cluster|slots") // (as acl_grants_test.go's)
	}
	if sel != "" {
		words = append(words, "(~dlock:wait:* "+sel+")")
	}
	return words
}

// No false report through a record left behind: a wait whose record's
// DEL failed (here the ACL refuses DEL on dlock:wait:*; in production a
// connection lost or a server stalled at that moment) leaves a record
// that says it waits for x, for the record's TTL (the queue TTL, 3 s).
// Its owner got x, released it, and runs holding a. B takes x and waits
// for a: a chain to a running holder. B must not give up.
func TestDeadlockAttackStaleRecordNoReport(t *testing.T) {
	t.Parallel()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	ctx := context.Background()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER"}, grantWithWaits(t, "+get +set")...)...).Err(); err != nil {
		t.Fatal(err)
	}
	asApp := func(o *redis.Options) { o.Username, o.Password = "app", "secret" }
	ca := newClient(t, newRedis(t, s, asApp), dlock.WithDeadlockDelay(atkDelay))
	cb := newClient(t, newRedis(t, s), dlock.WithDeadlockDelay(atkDelay))
	cr := newClient(t, newRedis(t, s))
	lx := mustLock(t, cr.Mutex("x"), ctx)
	la := mustLock(t, ca.Mutex("a"), ctx)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := ca.Mutex("x").Lock(la.Context(ctx))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	rec := "dlock:wait:" + la.Token()
	waitFor(t, "A's wait recorded", func() bool { n, _ := admin.Exists(ctx, rec).Result(); return n == 1 })
	unlock(t, lx)
	ax := <-got
	if ax == nil {
		t.FailNow()
	}
	if n, _ := admin.Exists(ctx, rec).Result(); n != 1 {
		t.Fatal("A's record was deleted: the ACL did not refuse its DEL")
	}
	unlock(t, ax) // A runs on, holding a
	lb := mustLock(t, cb.Mutex("x"), ctx)
	B := holding(lb).wait(t, 5*time.Second, lockOf(cb.Mutex("a")))
	time.Sleep(4 * atkDelay) // (B's checks run meanwhile: no signal marks them)
	unlock(t, la)
	if err := B.result(t); err != nil {
		t.Errorf("B, waiting for a lock whose holder runs (its wait's record left behind): %v", err)
	}
}

// No false report through a wait that ended while its connection was
// cut: its record's DEL and its place's leave are lost, and both outlive
// it (the queue TTL, 3 s). Its owner runs on, holding a; B, holding x
// (what the ended wait was for), waits for a: a chain to a running
// holder. B must not give up.
func TestDeadlockAttackCutConnectionRecordNoReport(t *testing.T) {
	t.Parallel()
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	p := atkPrefix(t)
	rdb := newRedis(t, srv)
	rdbA := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() {
		_ = rdbA.Close()
		envdriver.Forget(rdbA)
	})
	ca := newClient(t, rdbA, dlock.WithPrefix(p), dlock.WithDeadlockDelay(atkDelay))
	t.Cleanup(func() { px.Blackhole(false) }) // (before ca closes)
	cb := atkClient(t, p)
	ctx := context.Background()
	la := mustLock(t, ca.Mutex("a"), ctx, dlock.WithTTL(5*time.Second))
	lx := mustLock(t, cb.Mutex("x"), ctx)
	actx, cancel := context.WithCancel(la.Context(ctx))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := ca.Mutex("x").Lock(actx)
		done <- err
	}()
	recorded(t, rdb, p, la)
	px.Blackhole(true)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("A's Lock did not return within 5 s of its ctx's end")
	}
	if n, _ := rdb.Exists(ctx, p+":wait:"+la.Token()).Result(); n != 1 {
		t.Skip("A's record was deleted: the cut came too late")
	}
	// Within two delays of its last write a record left behind still
	// counts (as one read between a wait's end and its DEL does): B
	// begins once the record is older (internal/deadlock, deadlock.Wait.Stale).
	ttl := max(3*atkDelay, dlock.DefaultQueueTTL)
	waitFor(t, "A's record to age past two delays", func() bool {
		pt, err := rdb.PTTL(ctx, p+":wait:"+la.Token()).Result()
		return err == nil && ttl-pt > 2*atkDelay+50*time.Millisecond
	})
	B := holding(lx).wait(t, 8*atkDelay, lockOf(cb.Mutex("a")))
	if err := B.result(t); errors.Is(err, dlock.ErrDeadlock) {
		t.Errorf("B gave up for a cycle through a wait that had ended (its record and place left by a cut connection): %v", err)
	}
}
