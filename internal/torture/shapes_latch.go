package torture

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// latchTTL is the life of each phase of a latch: far longer than a phase
// takes, so that no check has to tell an expired latch from an open one.
const latchTTL = 20 * time.Second

// latchPhases reuses one latch, private to the goroutine, for 2-5 phases:
// TrySetCount(n), n count-downs from as many goroutines on random Clients
// (CountDownOnce with an id of the phase, given up after 50 µs-20 ms and
// retried with the same id until it succeeds; or CountDown, retried on an
// error as a user would, each call counting), a Wait, a Count now and
// then; the next phase begins once the latch has opened. Every call is
// recorded with its phase, and the latch checks compare what the latch
// said with the count-downs made in that phase.
func (g *gor) latchPhases(ctx context.Context) {
	c, cid := g.slot().current()
	name := fmt.Sprintf("L%d.%d.%08x", g.w.cfg.Slot, g.id, g.rng.Uint32())
	l := c.Latch(name)
	for p := int64(1); p <= int64(2+g.rng.IntN(4)) && ctx.Err() == nil; p++ {
		n := 1 + g.rng.IntN(4)
		if !g.latchSet(ctx, l, cid, p, n) {
			return
		}
		var wg sync.WaitGroup
		opened := make(chan bool, 1)
		go func() {
			opened <- g.latchWait(ctx, l, p)
		}()
		for k := range n {
			hg := g.helper()
			wg.Add(1)
			go func() {
				defer wg.Done()
				hg.countDown(ctx, name, p, fmt.Sprintf("p%d.%d", p, k))
			}()
		}
		if g.rng.IntN(3) == 0 {
			sleepCtx(ctx, logBetween(g.rng, 100*time.Microsecond, 5*time.Millisecond))
			g.latchCount(ctx, l, p)
		}
		wg.Wait()
		if !<-opened {
			return // not open: a new latch next time
		}
		if g.rng.IntN(3) == 0 {
			g.latchCount(ctx, l, p)
		}
		sleepCtx(ctx, logBetween(g.rng, 5*time.Millisecond, 60*time.Millisecond))
	}
}

// latchSet records TrySetCount of phase p; false when it did not set.
func (g *gor) latchSet(ctx context.Context, l *dlock.Latch, cid string, p int64, n int) bool {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t0 := now()
	ok, err := l.TrySetCount(sctx, int64(n), latchTTL)
	e := Event{T: t0, End: now(), K: kLatchSet, Client: cid, Names: []string{l.Name()}, Fences: []int64{p},
		Permits: n, D: us(latchTTL), Msg: "notset", EK: errKind(err)}
	if ok {
		e.Msg = "set"
	}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
	return ok && err == nil
}

// latchWait records a Wait of phase p (10 s ctx); true when it found the
// latch open.
func (g *gor) latchWait(ctx context.Context, l *dlock.Latch, p int64) bool {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t0 := now()
	err := l.Wait(wctx)
	e := Event{T: t0, End: now(), K: kLatchWait, Names: []string{l.Name()}, Fences: []int64{p}, EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
	return err == nil
}

// latchCount records a Count of phase p.
func (g *gor) latchCount(ctx context.Context, l *dlock.Latch, p int64) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t0 := now()
	n, err := l.Count(cctx)
	e := Event{T: t0, End: now(), K: kLatchCount, Names: []string{l.Name()}, Fences: []int64{p, n}, EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
}

// countDown counts latch name down once for phase p, on a random Client:
// CountDownOnce(id) three times in four, retried with the same id after
// short ctxs until it succeeds, else CountDown with a 2 s ctx, retried
// (each call counts) at most twice.
func (g *gor) countDown(ctx context.Context, name string, p int64, id string) {
	once := g.rng.IntN(4) != 0
	for try := range 30 {
		c, cid := g.slot().current()
		l := c.Latch(name)
		d := 2 * time.Second
		if once && try < 25 && g.rng.IntN(3) != 0 {
			d = logBetween(g.rng, 50*time.Microsecond, 20*time.Millisecond)
		}
		dctx, cancel := context.WithTimeout(ctx, d)
		t0 := now()
		var left int64
		var err error
		if once {
			left, err = l.CountDownOnce(dctx, id)
		} else {
			left, err = l.CountDown(dctx)
		}
		cancel()
		e := Event{T: t0, End: now(), K: kLatchDown, Client: cid, Names: []string{name}, Fences: []int64{p, left},
			EK: errKind(err)}
		if once {
			e.Msg = id
		}
		if err != nil {
			e.Err = err.Error()
		}
		g.emit(e)
		if err == nil || ctx.Err() != nil || (!once && try >= 2) {
			return
		}
	}
}
