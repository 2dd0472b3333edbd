//go:build unix

package torture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/drivertest/envdriver"
)

// probe takes every name once the workers are quiet (alive, their Clients
// open, nothing held but what they gave up): each must be free by the
// time the history allows, or the lock is held by nobody.
func (r *runner) probe(h *history) []Violation {
	rdb := r.srv.Client()
	defer rdb.Close()
	defer envdriver.Forget(rdb)
	c, err := envdriver.New(rdb, dlock.WithPrefix(prefix))
	if err != nil {
		return []Violation{{Kind: "process", T: now(), Msg: fmt.Sprintf("probe: dlock.New: %v", err)}}
	}
	defer c.Close()
	var (
		mu  sync.Mutex
		vs  []Violation
		wg  sync.WaitGroup
		ops int64
	)
	for _, name := range append(allNames(r.opts.Workers, r.opts.Goroutines), r.handoffNames()...) {
		deadline, last := h.probeDeadline(name)
		mu.Lock()
		ops++
		op := ops
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v := r.probeOne(c, name, op, deadline, last, h); v != nil {
				mu.Lock()
				vs = append(vs, *v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return vs
}

// probeOne tries name until it is free or deadline passes.
func (r *runner) probeOne(c *dlock.Client, name string, op, deadline int64, last busy, h *history) *Violation {
	try := func(ctx context.Context) (*dlock.Lease, error) {
		opt := dlock.WithTTL(5 * time.Second)
		switch lockKind(name) {
		case "fair":
			return c.FairMutex(name, opt).TryLock(ctx)
		case "rw":
			return c.RWMutex(name, opt).TryLock(ctx)
		case "sem":
			return c.Semaphore(name, semCap[name], opt).TryAcquire(ctx, semCap[name])
		}
		return c.Mutex(name, opt).TryLock(ctx)
	}
	start := now()
	r.rec.add(Event{T: start, K: kCall, W: "probe", Op: op, Names: []string{name}, TTLs: []int64{us(5 * time.Second)},
		Permits: semCap[name], Scn: "probe"})
	tries := 0
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := try(ctx)
		cancel()
		tries++
		if err == nil {
			p := l.Parts()[0]
			r.rec.add(Event{K: kGrant, W: "probe", Op: op, Lease: op, Names: []string{name}, Owners: []string{p.Token()},
				Fences: []int64{p.Fence()}, TTLs: []int64{us(5 * time.Second)}, Permits: semCap[name], Scn: "probe"})
			uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r.rec.add(Event{K: kUCall, W: "probe", Lease: op})
			err := l.Unlock(uctx)
			cancel()
			r.rec.add(Event{K: kUnlock, W: "probe", Lease: op, EK: errKind(err)})
			return nil
		}
		lastErr = err
		if now() > deadline {
			r.rec.add(Event{K: kFail, W: "probe", Op: op, EK: errKind(err), Err: err.Error()})
			r.rec.add(Event{K: kProbeFail, W: "probe", Names: []string{name}})
			v := &Violation{Kind: "held", T: deadline,
				Msg: fmt.Sprintf("%q is still held at %s, %v after the run stopped with every worker quiet: "+
					"the history allows it to be held until %s at the latest (%s); %d tries since %s, last: %v",
					name, h.rel(now()), time.Duration(now()-h.end).Round(time.Millisecond), h.rel(last.to), last.why,
					tries, h.rel(start), lastErr)}
			// Who holds it, as Redis says, and what the history says of them.
			state, tokens := r.inspect(name)
			v.Msg += "; in Redis: " + state
			whys := map[string]bool{}
			for _, l := range h.ordered {
				for i, n := range l.grant.Names {
					if n == name && tokens[l.grant.Owners[i]] && !l.grant.Reent {
						v.Leases = append(v.Leases, l.key)
						_, why := h.freeAt(l)
						whys[why] = true
					}
				}
			}
			v.Cat = fmt.Sprintf("held at the end by leases that were: %v", sortedKeys(whys))
			return v
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// inspect reads a lock's hash in Redis: its fields, its PTTL, and the
// owner tokens in it.
func (r *runner) inspect(name string) (string, map[string]bool) {
	rdb := r.srv.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k, err := dlock.KeysOf(prefix, name)
	if err != nil {
		return err.Error(), nil
	}
	fields, err := rdb.HGetAll(ctx, k.Lock).Result()
	if err != nil {
		return fmt.Sprintf("HGETALL %s: %v", k.Lock, err), nil
	}
	pttl, _ := rdb.PTTL(ctx, k.Lock).Result()
	tokens := map[string]bool{}
	for f := range fields {
		if len(f) > 2 && f[1] == ':' {
			f = f[2:]
		}
		if len(f) == 32 {
			tokens[f] = true
		}
	}
	return fmt.Sprintf("%s = %v, PTTL %v", k.Lock, fields, pttl), tokens
}
