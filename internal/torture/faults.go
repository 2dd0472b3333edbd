//go:build unix

package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// faultGap bounds the quiet time between two faults: sparse enough that
// hand-offs between them show whether waiters are woken in time.
const (
	faultGapMin = 1500 * time.Millisecond
	faultGapMax = 4 * time.Second
)

// inject injects random faults until ctx ends, then undoes what is still
// in effect (a frozen server or worker) before returning.
func (r *runner) inject(ctx context.Context, rng *rand.Rand) {
	admin := r.srv.Client(func(o *redis.Options) { o.MaxRetries = -1 })
	defer admin.Close()
	defer r.quorum.settle() // partitions healed, nodes back
	// The server's clock has an injector of its own, beside this one
	// (injectClock), so that its freezes and steps fall at any moment of
	// the other faults: in a hand-off round, a stall, a late delivery.
	faults, clockFaults := map[string]int{}, map[string]int{}
	for k, v := range r.opts.Faults {
		if slices.Contains(clockKinds, k) {
			clockFaults[k] = v
		} else {
			faults[k] = v
		}
	}
	var clockDone sync.WaitGroup
	defer clockDone.Wait()
	if weightOf(clockFaults) > 0 && r.clockShim {
		clockDone.Add(1)
		go func() {
			defer clockDone.Done()
			r.injectClock(ctx, rand.New(rand.NewPCG(r.opts.Seed, 0xc10c)), clockFaults)
		}()
	}
	for {
		sleepCtx(ctx, between(rng, faultGapMin, faultGapMax))
		if ctx.Err() != nil {
			return
		}
		kind := pick(rng, faults)
		if kind == "" {
			continue
		}
		if dl, ok := ctx.Deadline(); ok && (kind == "handoff" && time.Until(dl) < 5*time.Second || kind == "qsplit" && time.Until(dl) < 12*time.Second) {
			continue // a round takes up to ~5 s; the run would end late
		}
		t0 := now()
		msg, err := r.fault(kind, rng, admin)
		if err != nil {
			msg += fmt.Sprintf(" (error: %v)", err)
		}
		r.rec.add(Event{T: t0, End: now(), K: kFault, W: "parent", Msg: msg})
		r.logf("fault %s at %s: %s", kind, r.rel(t0), msg)
	}
}

// fault injects one fault and returns when its effect is over (a paused
// server resumed, a killed worker respawned).
func (r *runner) fault(kind string, rng *rand.Rand, admin *redis.Client) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch kind {
	case "pubsub":
		// A burst: each kill is a chance that a release falls in the
		// moment before go-redis has resubscribed.
		kills, total := 2+rng.IntN(7), 0
		var err error
		for i := range kills {
			if i > 0 {
				time.Sleep(between(rng, time.Millisecond, 10*time.Millisecond))
			}
			n, e := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int()
			total += n
			if err == nil {
				err = e
			}
		}
		return fmt.Sprintf("pubsub: CLIENT KILL TYPE pubsub x%d (%d connections)", kills, total), err
	case "normal":
		n, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Int()
		return fmt.Sprintf("normal: CLIENT KILL TYPE normal (%d connections)", n), err
	case "flush":
		return "flush: SCRIPT FLUSH", admin.Do(ctx, "SCRIPT", "FLUSH").Err()
	case "cpause":
		d := between(rng, 50*time.Millisecond, 400*time.Millisecond)
		return fmt.Sprintf("cpause: CLIENT PAUSE %v ALL", d), pauseClients(ctx, admin, d)
	case "spause":
		d := between(rng, 50*time.Millisecond, 400*time.Millisecond)
		return fmt.Sprintf("spause: redis-server SIGSTOP for %v", d), r.stopServer(d)
	case "restart":
		// Not while the clock injector has the server's clock frozen:
		// Restart holds the Server while it restarts, and the clock
		// would stay frozen past what the fault records (clockFault).
		r.clockMu.Lock()
		defer r.clockMu.Unlock()
		return "restart: redis-server kill -9 and restart with AOF", r.srv.Restart(true)
	case "stop":
		p := r.randomProc(rng)
		if p == nil {
			return "stop: no worker", nil
		}
		d := between(rng, 50*time.Millisecond, 1200*time.Millisecond)
		return fmt.Sprintf("stop: worker %s SIGSTOP for %v", p.id, d), p.freeze(func() { time.Sleep(d) })
	case "stall":
		// Long enough that a call bound to the server (go-redis without
		// ContextTimeoutEnabled waits its ReadTimeout, 3 s) outlives a
		// 100-300 ms ctx by far.
		d := between(rng, time.Second, 2*time.Second)
		switch rng.IntN(3) {
		case 0:
			err := admin.Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds())).Err()
			return fmt.Sprintf("stall: DEBUG SLEEP %v", d), err
		case 1:
			return fmt.Sprintf("stall: CLIENT PAUSE %v ALL", d), pauseClients(ctx, admin, d)
		default:
			return fmt.Sprintf("stall: redis-server SIGSTOP for %v", d), r.stopServer(d)
		}
	case "late":
		// One worker's path stalls: all its proxied connections (open or
		// opened meanwhile), or half of them, picked at random; they
		// recover one by one, in a random order.
		slot := rng.IntN(len(r.proxies))
		d := logBetween(rng, 150*time.Millisecond, 3*time.Second)
		half := rng.IntN(2) == 0
		// pick runs on the proxy's goroutines too: its own generator,
		// behind a lock.
		var mu sync.Mutex
		prng := rand.New(rand.NewPCG(rng.Uint64(), 0x1a7e))
		stalled, seen := 0, 0
		deliver := r.proxies[slot].Stall(func() bool {
			mu.Lock()
			defer mu.Unlock()
			seen++
			if !half || prng.IntN(2) == 0 {
				stalled++
				return true
			}
			return false
		}, prng.Shuffle)
		time.Sleep(d)
		deliver()
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("late: %d of %d proxied connections of worker slot %d (open or opened meanwhile) stalled for %v, then their commands delivered",
			stalled, seen, slot, d.Round(time.Millisecond)), nil
	case "reset":
		return r.resetFault(rng)
	case "blockedwrite":
		return r.blockedWrite(rng)
	case "qsplit":
		return r.qsplit(rng)
	case "qpart", "qrestart":
		return r.quorumFault(kind, rng)
	case "waitstop":
		return r.waitStop(rng)
	case "holdstop":
		return r.holdStop(rng)
	case "handoff":
		return r.handoff(rng)
	case "kill":
		p := r.randomProc(rng)
		if p == nil {
			return "kill: no worker", nil
		}
		p.mu.Lock()
		p.killed = true
		r.rec.add(Event{K: kKill, W: p.id})
		err := p.signal(syscall.SIGKILL)
		p.mu.Unlock()
		p.wait(10 * time.Second)
		time.Sleep(between(rng, 100*time.Millisecond, 500*time.Millisecond))
		np, err2 := r.respawn(p.slot)
		if err == nil {
			err = err2
		}
		id := "?"
		if np != nil {
			id = np.id
		}
		return fmt.Sprintf("kill: worker %s SIGKILL, respawned as %s", p.id, id), err
	}
	return kind + ": unknown", nil
}

// randomProc returns a random live worker.
func (r *runner) randomProc(rng *rand.Rand) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var live []*proc
	for _, p := range r.procs {
		if p.alive() {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[rng.IntN(len(live))]
}

// pauseClients pauses every client of the server (CLIENT PAUSE ALL) for d
// and returns when the pause is over.
func pauseClients(ctx context.Context, admin *redis.Client, d time.Duration) error {
	err := admin.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err()
	time.Sleep(d)
	return err
}

// stopServer freezes redis-server with SIGSTOP for d.
func (r *runner) stopServer(d time.Duration) error {
	if err := r.srv.Pause(); err != nil {
		return err
	}
	time.Sleep(d)
	return r.srv.Resume()
}

// freeze stops the process with SIGSTOP, runs during, and continues it.
func (p *proc) freeze(during func()) error {
	p.mu.Lock()
	p.stopped = true
	err := p.signal(syscall.SIGSTOP)
	p.mu.Unlock()
	during()
	p.mu.Lock()
	p.stopped = false
	err2 := p.signal(syscall.SIGCONT)
	p.mu.Unlock()
	if err == nil {
		err = err2
	}
	return err
}

// liveProc returns the current incarnation with id, if it is alive.
func (r *runner) liveProc(id string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p != nil && p.id == id && p.alive() {
			return p
		}
	}
	return nil
}

// holdStop freezes a worker right after it was granted a read hold of the
// rwstream name, for longer than that hold's TTL: its lease must end
// (Err) before a writer can have the lock, whatever its watchdog had sent
// before the freeze.
func (r *runner) holdStop(rng *rand.Rand) (string, error) {
	var e Event
	var p *proc
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		var ok bool
		e, ok = r.rec.lastGrant(func(e Event) bool {
			return len(e.Names) == 1 && e.Names[0] == rwStreamName && len(e.Sides) == 1 && e.Sides[0] == "r" &&
				e.T > now()-int64(20*time.Millisecond)
		})
		if ok {
			if p = r.liveProc(e.W); p != nil {
				break
			}
		}
	}
	if p == nil {
		return "holdstop: no fresh read hold", nil
	}
	ttl := time.Duration(e.TTLs[0]) * time.Microsecond
	// Around the hold's first renewal (the watchdog sends it from TTL/6
	// to TTL/3 after the grant), or at once.
	at := time.Duration(0)
	if rng.IntN(4) > 0 {
		at = between(rng, ttl/6-5*time.Millisecond, ttl/3+5*time.Millisecond)
	}
	time.Sleep(time.Until(time.Unix(0, e.T).Add(at)))
	d := ttl + between(rng, 50*time.Millisecond, 800*time.Millisecond)
	return fmt.Sprintf("holdstop: worker %s SIGSTOP for %v, %v after its read hold's grant (lease %d granted %s, TTL %v)",
		p.id, d, at.Round(time.Millisecond), e.Lease, r.rel(e.T), ttl), p.freeze(func() { time.Sleep(d) })
}

// waitStop freezes a worker that has a Lock waiting (called at least
// 50 ms ago, with a TTL of at most 1.2 s) for longer than that Lock's TTL
// and the queue TTL: a hand-off to it, or its place, expires while it is
// stopped, and it resumes in the middle of its wait.
func (r *runner) waitStop(rng *rand.Rand) (string, error) {
	var cands []Event
	for _, e := range r.rec.waiting(now() - int64(50*time.Millisecond)) {
		if len(e.TTLs) > 0 && slices.Max(e.TTLs) <= us(1200*time.Millisecond) && slices.Max(e.TTLs) > 0 &&
			!e.Reent && r.liveProc(e.W) != nil {
			cands = append(cands, e)
		}
	}
	if len(cands) == 0 {
		return "waitstop: no worker waiting", nil
	}
	e := cands[rng.IntN(len(cands))]
	p := r.liveProc(e.W)
	if p == nil {
		return "waitstop: no worker waiting", nil
	}
	ttl := time.Duration(slices.Max(e.TTLs)) * time.Microsecond
	d := 2*max(ttl, queueTTL) + between(rng, 100*time.Millisecond, 500*time.Millisecond)
	return fmt.Sprintf("waitstop: worker %s SIGSTOP for %v (waiting in %s on %v since %s, TTL %v)",
		p.id, d, callKey(e.W, e.Op), e.Names, r.rel(e.T), ttl), p.freeze(func() { time.Sleep(d) })
}

// The server's clock (TESTING.md, "Six worlds"): the run's redis-server
// runs under the clock shim (redistest.Options.ShimClock), and its own
// injector freezes its wall clock or steps it.
//
//   - clock: the clock stands still for 0.1-1.5 s and then runs on from
//     where it stood, the time it lost kept (a backward step of the time
//     it stood), or it steps back by 0.1-1 s. Nothing of dlock's order or
//     hand-offs rests on the server's clock; only expiries do, and those
//     come S later: the liveness bounds add what the clock lost
//     (model.go, clockLost).
//   - clockforward (off by default): a step forward by 0.1-1.5 s. Every
//     expiry nearer than that passes at once, so a holder that still
//     counts on its lease has a successor until its next renewal: two
//     owners, documented (docs/guarantees.md, "The server's clock"). It is
//     there to show that the checker sees that world's violations.
//
// The offset a clock fault leaves stays: the server's clock runs behind
// the real one for the rest of the run (forward steps put it ahead).
var clockKinds = []string{"clock", "clockforward"}

const (
	clockGapMin = 1 * time.Second // between two clock faults
	clockGapMax = 5 * time.Second
	// clockRunOnMargin is how far behind the stood-still reading the
	// clock runs on: the new offset is computed just before it is
	// written, and the shim reads it a moment later; for that moment the
	// clock still stands, and without a margin it would then jump forward
	// by it. The parent's goroutine may be descheduled for a while on a
	// loaded machine; a run-on that took longer than the margin says so
	// in its message.
	clockRunOnMargin = 100 * time.Millisecond
)

// weightOf is the total weight of w.
func weightOf(w map[string]int) int {
	n := 0
	for _, v := range w {
		n += max(v, 0)
	}
	return n
}

// injectClock injects clock faults, chosen by weight from w, until ctx
// ends; the clock runs (behind or ahead) when it returns.
func (r *runner) injectClock(ctx context.Context, rng *rand.Rand, w map[string]int) {
	for {
		sleepCtx(ctx, between(rng, clockGapMin, clockGapMax))
		if ctx.Err() != nil {
			return
		}
		kind := pick(rng, w)
		t0 := now()
		msg, lost, err := r.clockFault(kind, rng)
		if err != nil {
			msg += fmt.Sprintf(" (error: %v)", err)
		}
		// D: the server's clock time lost (µs; negative: gained).
		r.rec.add(Event{T: t0, End: now(), K: kFault, W: "parent", Msg: msg, D: us(lost)})
		r.logf("fault %s at %s: %s", kind, r.rel(t0), msg)
	}
}

// clockFault moves the server's clock once and returns what it did and how
// much time the server's clock lost by it (negative: gained), measured
// against the real clock.
func (r *runner) clockFault(kind string, rng *rand.Rand) (string, time.Duration, error) {
	r.clockMu.Lock()
	defer r.clockMu.Unlock()
	before := r.srv.ServerClock()
	switch {
	case kind == "clockforward":
		d := between(rng, 100*time.Millisecond, 1500*time.Millisecond)
		return fmt.Sprintf("clockforward: server clock stepped forward %v (now %v)", d.Round(time.Millisecond), before.Step(d)),
			-d, r.srv.StepClock(d)
	case rng.IntN(2) == 0:
		d := between(rng, 100*time.Millisecond, time.Second)
		return fmt.Sprintf("clock: server clock stepped back %v (now %v)", d.Round(time.Millisecond), before.Step(-d)),
			d, r.srv.StepClock(-d)
	}
	d := between(rng, 100*time.Millisecond, 1500*time.Millisecond)
	t0 := time.Now()
	if err := r.srv.SetClock(redistest.Frozen(before.Now())); err != nil {
		return "clock: freezing the server clock", 0, err
	}
	time.Sleep(time.Until(t0.Add(d)))
	t1 := time.Now()
	lost := t1.Sub(t0) + clockRunOnMargin
	err := r.srv.SetClock(before.Step(-lost))
	t2 := time.Now()
	msg := fmt.Sprintf("clock: server clock stood still %v, then ran on %v behind (now %v)",
		t1.Sub(t0).Round(time.Millisecond), lost.Round(time.Millisecond), r.srv.ServerClock())
	// The shim read the new offset by t2 (SetClock waits for that).
	if took := t2.Sub(t1); took > clockRunOnMargin {
		msg += fmt.Sprintf("; the run-on took %v to write: the clock may have jumped forward by up to %v",
			took.Round(time.Millisecond), (took - clockRunOnMargin).Round(time.Millisecond))
	}
	return msg, lost, err
}
