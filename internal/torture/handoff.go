//go:build unix

package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The handoff fault drives, from the parent, the moment that made a late
// hand-off look fresh (issue 16): holder A (the parent) holds a private
// name; a worker is told to wait for it with two Lock calls (two places in
// the queue); the parent SIGSTOPs that worker and unlocks, so the release
// hands the lock to a stopped waiter; once the handed hold and the places
// have expired, C (the parent, another Client) takes the lock with a
// higher fence and holds it while the worker is continued and for a while
// after. A waiter's Lock that then returns the handed (lower) fence with
// Err() nil is a fence inversion and two owners at once.

// hoWorker is the W of the parent's own events in the history.
const hoWorker = "ho"

// hoActor is the parent's side: two Clients (A and C) on one connection
// pool, and the ids of its events.
type hoActor struct {
	once   sync.Once
	err    error
	a, c   *dlock.Client
	close  func()
	ops    int64
	leases int64
	round  int
	names  []string
}

// handoffName is the private name of handoff round k: a Mutex, a
// FairMutex or an Election (lockKind tells them by prefix).
func handoffName(kind string, k int) string {
	return fmt.Sprintf("%sh%d", kind[:1], k) // mhK, fhK, ehK
}

// hoHold is a hold of the parent's: a Lease, or a Leadership (no owner:
// hoAcquire names it).
type hoHold struct {
	owner   string
	fence   int64
	err     func() error
	release func(context.Context) error
}

// leaseLock adapts a Lock method to hoAcquire.
func leaseLock(lock func(context.Context, ...dlock.LockOption) (*dlock.Lease, error)) func(context.Context, int64) (hoHold, error) {
	return func(ctx context.Context, _ int64) (hoHold, error) {
		l, err := lock(ctx)
		if err != nil {
			return hoHold{}, err
		}
		return hoHold{l.Token(), l.Fence(), l.Err, l.Unlock}, nil
	}
}

func (r *runner) hoInit() error {
	ho := &r.ho
	ho.once.Do(func() {
		rdb := r.srv.Client()
		if ho.a, ho.err = envdriver.New(rdb, dlock.WithPrefix(prefix)); ho.err != nil {
			return
		}
		if ho.c, ho.err = envdriver.New(rdb, dlock.WithPrefix(prefix)); ho.err != nil {
			return
		}
		ho.close = func() { _ = ho.a.Close(); _ = ho.c.Close(); _ = rdb.Close(); envdriver.Forget(rdb) }
	})
	return ho.err
}

// hoAcquire records and makes one Lock (or Campaign) by the parent
// (Client id cid); lock is given the call's op.
func (r *runner) hoAcquire(cid, name string, ttl, timeout time.Duration, lock func(context.Context, int64) (hoHold, error)) (*hoHold, int64) {
	ho := &r.ho
	ho.ops++
	op := ho.ops
	t0 := now()
	dl := time.Unix(0, t0).Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	r.rec.add(Event{T: t0, K: kCall, W: hoWorker, Op: op, Client: cid, Names: []string{name}, Sides: []string{""},
		TTLs: []int64{us(ttl)}, Wait: true, Timeout: us(timeout), DL: dl.UnixNano(), Scn: "handoff"})
	st := now()
	l, err := lock(ctx, op)
	t := now()
	if err != nil {
		r.rec.add(Event{T: t, K: kFail, W: hoWorker, Op: op, EK: errKind(err), Err: err.Error(), St: st, DL: dl.UnixNano()})
		return nil, 0
	}
	errNow := l.err()
	ho.leases++
	owner := l.owner
	if owner == "" { // a leadership
		owner = leaderOwner(hoWorker, ho.leases)
	}
	e := Event{T: t, K: kGrant, W: hoWorker, Op: op, Lease: ho.leases, Client: cid, Names: []string{name}, Sides: []string{""},
		Owners: []string{owner}, Fences: []int64{l.fence}, TTLs: []int64{us(ttl)}, Scn: "handoff",
		St: st, DL: dl.UnixNano(), EK: errKind(errNow)}
	r.rec.add(e)
	return &l, ho.leases
}

// hoBelieve records Err() of a parent lease.
func (r *runner) hoBelieve(l *hoHold, id int64) bool {
	t := now()
	if err := l.err(); err != nil {
		r.rec.add(Event{K: kLost, W: hoWorker, Lease: id, EK: errKind(err), Err: err.Error()})
		return false
	}
	r.rec.add(Event{T: t, K: kBelief, W: hoWorker, Lease: id})
	return true
}

// hoUnlock records and makes the parent's Unlock.
func (r *runner) hoUnlock(l *hoHold, id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r.rec.add(Event{K: kUCall, W: hoWorker, Lease: id, Msg: "normal"})
	err := l.release(ctx)
	e := Event{K: kUnlock, W: hoWorker, Lease: id, EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
		defer r.rec.add(Event{K: kAbandon, W: hoWorker, Lease: id, Msg: "unlock failed"})
	}
	r.rec.add(e)
}

// handoff runs one round (see above) against a random live worker.
func (r *runner) handoff(rng *rand.Rand) (string, error) {
	if err := r.hoInit(); err != nil {
		return "handoff: dlock.New", err
	}
	p := r.randomProc(rng)
	if p == nil {
		return "handoff: no worker", nil
	}
	ho := &r.ho
	kind := []string{"mutex", "fair", "election"}[rng.IntN(3)]
	name := handoffName(kind, ho.round)
	ho.round++
	r.mu.Lock()
	ho.names = append(ho.names, name)
	r.mu.Unlock()
	ttl := between(rng, 500*time.Millisecond, time.Second)
	opts := []dlock.LockOption{dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL)}
	lockOf := func(c *dlock.Client) func(context.Context, int64) (hoHold, error) {
		switch kind {
		case "election":
			e := c.Election(name, opts...)
			return func(ctx context.Context, op int64) (hoHold, error) {
				ld, err := e.Campaign(ctx, valueOf(hoWorker, op, 0))
				if err != nil {
					return hoHold{}, err
				}
				return hoHold{fence: ld.Term(), err: ld.Err, release: ld.Resign}, nil
			}
		case "fair":
			return leaseLock(c.FairMutex(name, opts...).Lock)
		}
		return leaseLock(c.Mutex(name, opts...).Lock)
	}
	a, aid := r.hoAcquire("hoA", name, ttl, 2*time.Second, lockOf(ho.a))
	if a == nil {
		return "handoff: " + name + ": A's Lock failed", nil
	}
	// Half the rounds, when the clock faults are on, run on the server
	// clock of issue 33's item 10 (hoClock): it stands still while the
	// waiters queue and are handed the lock, runs on so that the handed
	// hold and the places expire, and is back where it stood when the
	// waiter resumes. Its own generator: the seed's other choices stay.
	var clk *hoClock
	if r.clockShim && r.opts.Faults["clock"] > 0 && rand.New(rand.NewPCG(r.opts.Seed, 0xc10c+uint64(ho.round))).IntN(2) == 0 {
		clk = r.hoClockStart(name)
		defer clk.end()
	}
	r.hoBelieve(a, aid)
	p.send(fmt.Sprintf("handoff %s %s %d %d", name, kind, ttl.Microseconds(), 2))
	// Both waiters have called Lock; give them a moment to take their
	// places (sometimes less: a waiter caught mid-attempt).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !r.rec.has(2, func(e Event) bool {
		return e.K == kCall && e.W == p.id && e.Scn == "handoff-wait" && len(e.Names) == 1 && e.Names[0] == name
	}) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(between(rng, 20*time.Millisecond, 200*time.Millisecond))

	var c *hoHold
	var cid int64
	hold := 2*max(ttl, queueTTL) + between(rng, 100*time.Millisecond, 400*time.Millisecond)
	stopped := now()
	err := p.freeze(func() {
		time.Sleep(between(rng, 0, 30*time.Millisecond))
		r.hoBelieve(a, aid)
		r.hoUnlock(a, aid) // hands the lock to the stopped waiter
		clk.runOn()        // the handed hold and the places expire
		time.Sleep(time.Until(time.Unix(0, stopped).Add(hold)))
		c, cid = r.hoAcquire("hoC", name, ttl, 3*time.Second, lockOf(ho.c))
		if c != nil {
			r.hoBelieve(c, cid)
		}
		clk.stepBack() // new places of the waiter expire when its old one did
	})
	cont := now()
	msg := fmt.Sprintf("handoff: worker %s SIGSTOP for %v waiting on %s %q (TTL %v), unlocked by A, then C ",
		p.id, time.Duration(cont-stopped).Round(time.Millisecond), kind, name, ttl)
	if clk != nil {
		msg = "handoff on a stood-still server clock" + strings.TrimPrefix(msg, "handoff")
	}
	if c == nil {
		return msg + "failed to take it", err
	}
	msg += fmt.Sprintf("took fence %d", c.fence)
	// C holds on while the waiters wake: a waiter granted now with a
	// lower fence holds it together with C.
	until := time.Now().Add(between(rng, 500*time.Millisecond, time.Second))
	for time.Now().Before(until) && r.hoBelieve(c, cid) {
		time.Sleep(20 * time.Millisecond)
	}
	r.hoUnlock(c, cid)
	return msg, err
}

// handoffNames returns the names of the rounds run so far.
func (r *runner) handoffNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ho.names...)
}

// handoffWait is a worker's side: n Lock calls (Campaigns) on one Client,
// waiting for name, each then working a little and unlocking (resigning). cmd is
// "handoff NAME KIND TTLµs N".
func (w *worker) handoffWait(ctx context.Context, cmd string) {
	f := strings.Fields(cmd)
	if len(f) != 5 {
		stderrf("torture worker: bad command %q", cmd)
		return
	}
	name, kind := f[1], f[2]
	ttlUS, _ := strconv.ParseInt(f[3], 10, 64)
	n, _ := strconv.Atoi(f[4])
	ttl := time.Duration(ttlUS) * time.Microsecond
	g := w.newGor(900, uint64(now()))
	c, cid := g.slot().current()
	opts := []dlock.LockOption{dlock.WithTTL(ttl), dlock.WithQueueTTL(queueTTL)}
	m, fm, e := c.Mutex(name, opts...), c.FairMutex(name, opts...), c.Election(name, opts...)
	lock := func(ctx context.Context) (*dlock.Lease, error) {
		if kind == "fair" {
			return fm.Lock(ctx)
		}
		return m.Lock(ctx)
	}
	var wg sync.WaitGroup
	for range n {
		hg := g.helper()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp := spec{scn: "handoff-wait", client: cid, names: []string{name}, ttls: one(name, ttl), wait: true,
				timeout: 15 * time.Second}
			if kind == "election" {
				if h := hg.campaign(ctx, sp, e); h != nil {
					hg.work(ctx, h, logBetween(hg.rng, 100*time.Microsecond, 5*time.Millisecond))
					rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_ = hg.resign(rctx, h, "normal")
					cancel()
				}
				return
			}
			if h := hg.acquire(ctx, sp, func(ctx context.Context) (*dlock.Lease, error) { return lock(ctx) }); h != nil {
				hg.work(ctx, h, logBetween(hg.rng, 100*time.Microsecond, 5*time.Millisecond))
				hg.release(h, relNormal)
			}
		}()
	}
	wg.Wait()
}

// hoClock is a handoff round's server clock (issue 33, item 10): it
// stands still at v from before the waiters queue, runs on from v while
// the handed hold and the places expire and C takes the lock, and is
// stood still at v again before the waiter resumes, so that its new
// places expire when its old one did: a place named by its expiry made the
// stale hand-off look new (two owners). At the end of the round it runs
// on behind, having lost the round's length, recorded as a clock fault
// (liveness adds it). It holds clockMu: no other clock fault meanwhile.
type hoClock struct {
	r      *runner
	name   string
	before redistest.Clock
	t0     time.Time
	v      time.Time // where it stands
	errs   []error
}

func (r *runner) hoClockStart(name string) *hoClock {
	r.clockMu.Lock()
	c := &hoClock{r: r, name: name, before: r.srv.ServerClock(), t0: time.Now()}
	c.v = c.before.Now()
	c.set(redistest.Frozen(c.v))
	return c
}

func (c *hoClock) set(cl redistest.Clock) {
	if err := c.r.srv.SetClock(cl); err != nil {
		c.errs = append(c.errs, err)
	}
}

// runOn lets the clock run from where it stands (a little behind it: see
// clockRunOnMargin).
func (c *hoClock) runOn() {
	if c != nil {
		c.set(redistest.Offset(c.v.Sub(time.Now()) - clockRunOnMargin))
	}
}

// stepBack puts the clock back where it stood, standing still.
func (c *hoClock) stepBack() {
	if c != nil {
		c.set(redistest.Frozen(c.v))
	}
}

// end lets the clock run on from where it stands, records what it lost,
// and lets the other clock faults go.
func (c *hoClock) end() {
	defer c.r.clockMu.Unlock()
	lost := time.Since(c.t0) + clockRunOnMargin
	c.set(c.before.Step(-lost))
	msg := fmt.Sprintf("clock: server clock stood still for handoff round %q, ran on, stepped back and stood still again; then ran on %v behind (now %v)",
		c.name, lost.Round(time.Millisecond), c.r.srv.ServerClock())
	if len(c.errs) > 0 {
		msg += fmt.Sprintf(" (error: %v)", errors.Join(c.errs...))
	}
	c.r.rec.add(Event{T: c.t0.UnixNano(), End: now(), K: kFault, W: "parent", Msg: msg, D: us(lost)})
	c.r.logf("fault clock at %s: %s", c.r.rel(c.t0.UnixNano()), msg)
}
