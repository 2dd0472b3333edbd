package torture

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
)

// Elections in the history: a Campaign is an acquire (call, then grant
// with the term as its fence, or fail), a Resign an Unlock (ucall,
// unlock), and the checks of exclusive locks apply as they are. Each
// Campaign is an owner of its own (elections are not re-entrant), named
// by leaderOwner: a Leadership does not tell its token. A leader's value
// names the Campaign that recorded it (valueOf), so that a value read back
// by Leader or Observe tells whose term it belongs to.

// valueOf is the n-th value (0: Campaign's, then each Proclaim's) of the
// Campaign that worker w called as op.
func valueOf(w string, op int64, n int) string { return fmt.Sprintf("%s/%d", callKey(w, op), n) }

// campaignOf returns the call key of the Campaign a value belongs to.
func campaignOf(value string) (string, bool) {
	i := strings.LastIndexByte(value, '/')
	if i < 0 {
		return "", false
	}
	return value[:i], true
}

// againValueOf is the value of a leader's second Campaign on its own
// Client (nestedCampaign), which worker w called as op while the
// leadership of its Campaign outer lasted: it names outer, whose
// leadership it proclaims on, numbered 900 + op%100. When outer's
// leadership has ended by then, that Campaign is a candidate of its own
// and may win a term of its own with this value (seed 396980891): the
// checker finds it by the number (againOf) among the re-entries of
// outer's lease.
func againValueOf(w string, outer, op int64) string { return valueOf(w, outer, 900+int(op%100)) }

// againOf returns op%100 of the second Campaign whose value is value
// (againValueOf); false for any other value.
func againOf(value string) (int64, bool) {
	i := strings.LastIndexByte(value, '/')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(value[i+1:], 10, 64)
	if err != nil || n < 900 || n >= 1000 {
		return 0, false
	}
	return n - 900, true
}

// leaderOwner is the owner recorded for a leadership: its lease key.
func leaderOwner(w string, lease int64) string { return "ld:" + leaseKey(w, lease) }

// elecTTL picks a Campaign's lease: renewed mostly, 100-800 ms, or 2-4 s
// now and then (a lost wake-up then shows as a wait of seconds), or a
// fixed lease (WithLease) that ends by itself.
func (g *gor) elecTTL() (dlock.LockOption, time.Duration, bool) {
	switch n := g.rng.IntN(10); {
	case n == 0:
		d := between(g.rng, 2*time.Second, 4*time.Second)
		return dlock.WithTTL(d), d, false
	case n < 3:
		d := between(g.rng, 100*time.Millisecond, 800*time.Millisecond)
		return dlock.WithLease(d), d, true
	default:
		d := between(g.rng, 100*time.Millisecond, 800*time.Millisecond)
		return dlock.WithTTL(d), d, false
	}
}

// campaign records and makes one Campaign on e (sp names the election);
// nil when it failed.
func (g *gor) campaign(parent context.Context, sp spec, e *dlock.Election) *held {
	op, ctx, cancel, ce, st := g.begin(parent, sp)
	defer cancel()
	value := valueOf(g.w.cfg.ID, op, 0)
	began := time.Now()
	g.w.values.record(value, recording{client: sp.client, name: sp.names[0], began: began})
	ld, err := e.Campaign(ctx, value)
	t := now()
	if err != nil {
		g.failed(ce, st, t, err)
		return nil
	}
	// The leadership begins here (see acquire).
	errNow := ld.Err()
	name := sp.names[0]
	h := &held{id: g.w.leases.Add(1), ld: ld, op: op, client: sp.client, names: sp.names, ttl: sp.ttls[name], fixed: sp.fixed}
	owner, again := g.w.leaders.LoadOrStore(ld, leaderOwner(g.w.cfg.ID, h.id))
	ge := Event{T: t, K: kGrant, Op: op, Lease: h.id, Client: sp.client, Scn: sp.scn, St: st, DL: ce.DL,
		EK: errKind(errNow), Names: sp.names, Sides: []string{""}, Owners: []string{owner.(string)},
		Fences: []int64{ld.Term()}, TTLs: []int64{us(sp.ttls[name])}, Reent: again}
	if errNow != nil {
		ge.Err = errNow.Error()
	}
	g.emit(ge)
	if v := ld.Value(); v != value && !g.w.values.shares(v, recording{client: sp.client, name: name, term: ld.Term(), began: began}) {
		g.fatal("Campaign of %q returned a leadership with value %q, want %q", name, v, value)
	}
	return h
}

// recordings are the values a worker's Campaigns and Proclaims recorded,
// each with where and when its call began. A Campaign's leadership may
// carry, by the time its Value is read, a value another call recorded on
// the same leadership meanwhile: a Campaign on the same Client that found
// it and proclaimed on it (Campaign's "leads already"; seed 274153045), or
// a Proclaim of a lead that shares it, even one of an earlier Campaign
// (seed 66545729). That is documented: Value is the value as last
// recorded, and they share the leadership. Any other value is still
// wrong: one whose call began before this Campaign did (stale), or one
// recorded through another Client, on another election, in another term,
// or by another worker.
type recordings struct{ m sync.Map } // value -> recording

// recording is where and when a call that records a value began.
type recording struct {
	client, name string    // the Client's id (spec.client), the election
	term         int64     // a Proclaim's leadership's term; 0 for a Campaign (not known until it returns)
	began        time.Time // when the call began
}

// record notes the call that records v.
func (r *recordings) record(v string, at recording) { r.m.Store(v, at) }

// shares reports whether v was recorded on the leadership that c (this
// Campaign: its Client, election, term, and when it began) returned, by a
// call that began after c did.
func (r *recordings) shares(v string, c recording) bool {
	x, ok := r.m.Load(v)
	if !ok {
		return false
	}
	at := x.(recording)
	return at.client == c.client && at.name == c.name && (at.term == 0 || at.term == c.term) && at.began.After(c.began)
}

// elect is the election scenario: 1-3 candidates, each a goroutine of its
// own on a random Client (now and then a Client of its own), Campaign on
// one shared election with a short or long ctx; the winner leads for a
// while (see lead) and lets go (see letGo).
func (g *gor) elect(ctx context.Context) {
	name := g.pickName(elecNames)
	var wg sync.WaitGroup
	for range 1 + g.rng.IntN(3) {
		hg := g.helper()
		wg.Add(1)
		go func() {
			defer wg.Done()
			hg.candidate(ctx, name)
		}()
	}
	wg.Wait()
}

// candidate is one Campaign and, if it wins, one leadership.
func (g *gor) candidate(ctx context.Context, name string) {
	s := g.slot()
	c, cid := s.current()
	var own *dlock.Client
	if g.rng.IntN(8) == 0 {
		var err error
		if own, err = envdriver.New(s.rdb, dlock.WithPrefix(prefix)); err != nil {
			g.fatal("dlock.New: %v", err)
			return
		}
		c, cid = own, fmt.Sprintf("p%d", g.w.privates.Add(1))
	}
	closeOwn := func() {
		if own != nil {
			t0 := now()
			err := own.Close()
			g.emit(Event{T: t0, End: now(), K: kClose, Client: cid, EK: errKind(err)})
			own = nil
		}
	}
	defer closeOwn()
	opt, ttl, fixed := g.elecTTL()
	e := c.Election(name, opt, dlock.WithQueueTTL(queueTTL))
	sp := spec{scn: "election", client: cid, names: []string{name}, ttls: one(name, ttl), fixed: fixed, wait: true}
	if g.rng.IntN(10) < 3 {
		sp.timeout = logBetween(g.rng, 50*time.Microsecond, 50*time.Millisecond)
	} else {
		sp.timeout = between(g.rng, 200*time.Millisecond, 3*time.Second)
	}
	if g.rng.IntN(4) == 0 {
		g.leaderRead(ctx, e, name, nil)
	}
	h := g.campaign(ctx, sp, e)
	if h == nil {
		return
	}
	g.lead(ctx, h, e)
	if own != nil && g.rng.IntN(2) == 0 {
		// Client.Close while leading: Close must end the leadership and
		// free the election at once.
		g.flush(h)
		closeOwn()
		if h.err() == nil {
			g.fatal("leadership %d of a closed Client: Err() == nil", h.id)
		}
		g.emit(Event{K: kAbandon, Lease: h.id, Msg: "left to Client.Close"})
		g.refused(h)
		return
	}
	g.letGo(h)
}

// lead is the leader's work: check Err and sleep, and between those
// Proclaim a new value (with a live or an ended ctx) or read the leader.
func (g *gor) lead(ctx context.Context, h *held, e *dlock.Election) {
	op, n := h.op, 0
	for range 1 + g.rng.IntN(4) {
		if !g.work(ctx, h, logBetween(g.rng, 200*time.Microsecond, 40*time.Millisecond)) {
			return
		}
		switch k := g.rng.IntN(10); {
		case k < 3:
			n++
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			g.proclaim(pctx, h, valueOf(g.w.cfg.ID, op, n))
			cancel()
		case k < 4:
			n++
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			g.proclaim(ended, h, valueOf(g.w.cfg.ID, op, n))
		case k < 6:
			g.leaderRead(ctx, e, h.names[0], h)
		}
	}
}

// proclaim sets the leader's value: a Proclaim that succeeds sets Value,
// one that fails leaves it. Another Campaign of the same Client on the
// same election returns the same Leadership and proclaims its own value
// (the worker's leaders), maybe meanwhile: Value may then be that value
// instead, which is no fault of this call's.
func (g *gor) proclaim(ctx context.Context, h *held, v string) {
	before := h.ld.Value()
	g.w.values.record(v, recording{client: h.client, name: h.names[0], term: h.ld.Term(), began: time.Now()})
	err := h.ld.Proclaim(ctx, v)
	switch after := h.ld.Value(); {
	case err == nil && after == before && before != v:
		g.fatal("Proclaim(%q) of leadership %d succeeded, and Value() is still %q", v, h.id, after)
	case err != nil && after == v && before != v:
		g.fatal("Proclaim(%q) of leadership %d failed (%v), and Value() changed from %q to it", v, h.id, err, before)
	}
}

// leaderRead reads who leads name and records it; h is the reader's own
// leadership, if it leads. A leader that still believes it leads right
// after the read (Err nil) must have been read as the leader.
func (g *gor) leaderRead(ctx context.Context, e *dlock.Election, name string, h *held) {
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st := now()
	info, err := e.Leader(rctx)
	t := now()
	if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
		return
	}
	if err == nil && info.Term == 0 {
		g.fatal("Leader of %q returned no error and a zero term", name)
	}
	ev := Event{T: t, K: kLeader, St: st, Names: []string{name}, Fences: []int64{info.Term}, Msg: info.Value, EK: errKind(err)}
	if h != nil && g.believe(h) {
		ev.Lease = h.id
	}
	g.emit(ev)
}

// Ways a leader lets go.
const (
	resNormal = iota // Resign with a live ctx
	resEnded         // Resign with an ended ctx
	resTiny          // Resign with a ctx of 20-500 µs
	resTwice         // Resign, then Resign again: the same result
)

// letGo resigns h in a random way. Whatever Resign returns, the
// leadership is over when it returns, and a later Proclaim is refused.
func (g *gor) letGo(h *held) {
	if errors.Is(h.err(), dlock.ErrClosed) && g.rng.IntN(2) == 0 {
		g.emit(Event{K: kAbandon, Lease: h.id, Msg: "left to Client.Close"})
		return
	}
	mode := resNormal
	switch n := g.rng.IntN(100); {
	case n < 12:
		mode = resEnded
	case n < 20:
		mode = resTiny
	case n < 30:
		mode = resTwice
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var err error
	switch mode {
	case resEnded:
		ended, cancelEnded := context.WithCancel(context.Background())
		cancelEnded()
		err = g.resign(ended, h, "ended")
	case resTiny:
		tiny, cancelTiny := context.WithTimeout(context.Background(), between(g.rng, 20*time.Microsecond, 500*time.Microsecond))
		err = g.resign(tiny, h, "tiny")
		cancelTiny()
	default:
		err = g.resign(ctx, h, "normal")
		if mode == resTwice {
			if again := h.ld.Resign(ctx); !sameErr(again, err) {
				g.fatal("Resign of leadership %d returned %v, then %v (want the same)", h.id, err, again)
			}
		}
	}
	if err != nil {
		// Nothing to retry: the release goes on in the background.
		g.emit(Event{K: kAbandon, Lease: h.id, Msg: "resign failed"})
	}
	if g.rng.IntN(4) == 0 {
		g.refused(h)
	}
}

// resign records and makes one Resign call.
func (g *gor) resign(ctx context.Context, h *held, how string) error {
	g.flush(h)
	g.emit(Event{K: kUCall, Lease: h.id, Msg: how})
	err := h.ld.Resign(ctx)
	e := Event{K: kUnlock, Lease: h.id, EK: errKind(err)}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
	if h.err() == nil {
		g.fatal("Resign (%s) of leadership %d returned %v, and Err() is nil", how, h.id, err)
	}
	return err
}

// refused checks that an ended leadership refuses Proclaim.
func (g *gor) refused(h *held) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := h.ld.Proclaim(ctx, "after the end"); !errors.Is(err, dlock.ErrNotHeld) {
		g.fatal("Proclaim of ended leadership %d (%v) returned %v, want ErrNotHeld", h.id, h.err(), err)
	}
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return errors.Is(a, b)
}

// observe follows one election (by worker slot) until ctx ends and
// records every state it is sent. A channel closed before ctx ends (its
// Client was closed by reopen) is followed by a new Observe on the slot's
// current Client.
func (g *gor) observe(ctx context.Context) {
	name := elecNames[g.w.cfg.Slot%len(elecNames)]
	s := g.w.slots[g.w.cfg.Slot%len(g.w.slots)]
	for ctx.Err() == nil {
		c, _ := s.current()
		for info := range c.Election(name).Observe(ctx) {
			if info.Err != nil {
				continue // Redis could not be read: the last state, not a new one
			}
			g.emit(Event{K: kObserve, Names: []string{name}, Fences: []int64{info.Term}, Msg: info.Value})
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}
