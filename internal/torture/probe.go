//go:build unix

package torture

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/redis/go-redis/v9"
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
	// The RedLock names, on the quorum nodes directly (the partitions
	// have healed).
	var qnodes []*redis.Client
	for _, n := range r.quorum.nodes {
		qn := n.Client()
		defer qn.Close()
		qnodes = append(qnodes, qn)
	}
	qc, err := dlock.NewQuorum(qnodes, dlock.WithPrefix(prefix))
	if err != nil {
		return []Violation{{Kind: "process", T: now(), Msg: fmt.Sprintf("probe: dlock.NewQuorum: %v", err)}}
	}
	defer qc.Close()
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
			pc := c
			if lockKind(name) == "quorum" {
				pc = qc
			}
			if v := r.probeOne(pc, name, op, deadline, last, h); v != nil {
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
	// try takes name once; release lets it go.
	type taken struct {
		owner   string
		fence   int64
		release func(context.Context) error
	}
	rn := realName(name) // a long name's, for its alias
	try := func(ctx context.Context) (taken, error) {
		opt := dlock.WithTTL(5 * time.Second)
		var l *dlock.Lease
		var err error
		switch lockKind(name) {
		case "fair":
			l, err = c.FairMutex(rn, opt).TryLock(ctx)
		case "rw":
			l, err = c.RWMutex(name, opt).TryLock(ctx)
		case "sem":
			l, err = c.Semaphore(name, semCap[name], opt).TryAcquire(ctx, semCap[name])
		case "election":
			// No TryLock: a Campaign bounded by ctx, as short as a free
			// election allows.
			ld, err := c.Election(name, opt).Campaign(ctx, valueOf("probe", op, 0))
			if err != nil {
				return taken{}, err
			}
			return taken{leaderOwner("probe", op), ld.Term(), ld.Resign}, nil
		default:
			l, err = c.Mutex(rn, opt).TryLock(ctx)
		}
		if err != nil {
			return taken{}, err
		}
		p := l.Parts()[0]
		return taken{p.Token(), p.Fence(), l.Unlock}, nil
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
			r.rec.add(Event{K: kGrant, W: "probe", Op: op, Lease: op, Names: []string{name}, Owners: []string{l.owner},
				Fences: []int64{l.fence}, TTLs: []int64{us(5 * time.Second)}, Permits: semCap[name], Scn: "probe"})
			uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r.rec.add(Event{K: kUCall, W: "probe", Lease: op})
			err := l.release(uctx)
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
			state, tokens, calls := r.inspect(name)
			v.Msg += "; in Redis: " + state
			whys := map[string]bool{}
			for _, l := range h.ordered {
				for i, n := range l.grant.Names {
					if n == name && (tokens[l.grant.Owners[i]] || calls[callKey(l.w, l.grant.Op)]) && !l.grant.Reent {
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

// inspect reads a lock's key in Redis: its fields, its PTTL, the owner
// tokens in it, and for an election the Campaigns its values name (the
// owners recorded for leaderships are not their tokens).
func (r *runner) inspect(name string) (string, map[string]bool, map[string]bool) {
	rdb := r.srv.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k, err := dlock.KeysOf(prefix, realName(name))
	if err != nil {
		return err.Error(), nil, nil
	}
	if lockKind(name) == "election" {
		k.Lock += ":election" // "<prefix>:{<name>}:election" (see dlock.Election)
	}
	// A mutex's or an election's hold is one string (protocol.ParseHold),
	// read as the fields the other kinds' hashes keep.
	var fields map[string]string
	if typ, err := rdb.Type(ctx, k.Lock).Result(); err != nil {
		return fmt.Sprintf("TYPE %s: %v", k.Lock, err), nil, nil
	} else if typ == "string" {
		v, err := rdb.Get(ctx, k.Lock).Result()
		if err != nil && err != redis.Nil {
			return fmt.Sprintf("GET %s: %v", k.Lock, err), nil, nil
		}
		if h, ok := protocol.ParseHold(v); ok {
			fields = h.Fields()
		}
	} else if fields, err = rdb.HGetAll(ctx, k.Lock).Result(); err != nil {
		return fmt.Sprintf("HGETALL %s: %v", k.Lock, err), nil, nil
	}
	pttl, _ := rdb.PTTL(ctx, k.Lock).Result()
	tokens, calls := map[string]bool{}, map[string]bool{}
	for f, v := range fields {
		if key, ok := campaignOf(v); ok && strings.HasPrefix(f, "v:") {
			calls[key] = true
		}
		if len(f) > 2 && f[1] == ':' {
			f = f[2:]
		}
		if len(f) == 32 {
			tokens[f] = true
		}
	}
	// A long name is shown by its alias.
	return fmt.Sprintf("%s = %v, PTTL %v", strings.ReplaceAll(k.Lock, realName(name), name), fields, pttl), tokens, calls
}
