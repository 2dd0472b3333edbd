package torture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/redis/go-redis/v9"
)

// The fenced store (issue 27). While a hold works, now and then it writes
// to the store of its first name through fence/redisfence's Guard, with
// the hold's fence: a Tx that SETs the data and RPUSHes '<fence> <id>' to
// the name's log, on a random one of the worker's go-redis clients (two of
// which go through the worker's fault proxy, so that late delivery hits
// these writes too), with a 5-300 ms ctx. The worker records each write's
// outcome (kFWrite: "" committed, "stale" refused, else an error kind:
// unknown). After the run the parent reads every log (kFLog), and the
// checker (checkFencedStore) verifies the store: the fences in a log never
// go down (no write was accepted with a fence below one accepted before:
// each accepted write's fence was the highest so far), every write
// reported committed is in its log once, and no write reported stale is.
const (
	kFWrite = "fwrite" // a fenced write returned (Names: its name, Fences: its fence, Msg: its id, EK: "", "stale" or an error kind)
	kFLog   = "flog"   // parent: a name's log after the run (Fences and Owners: the fences and ids, in order)
)

// fencedKeys are the data and log of name's store: one hash tag, so that
// they are in the slot of the Guard's record of name on a cluster too.
func fencedKeys(name string) (data, log string) {
	return "tf:{" + name + "}:data", "tf:{" + name + "}:log"
}

// fencedWrite makes one fenced write of h's first name.
func (g *gor) fencedWrite(ctx context.Context, h *held) {
	var f int64
	if h.ld != nil {
		f = h.ld.Term()
	} else {
		f = h.lease.Fence()
	}
	name := h.names[0]
	data, log := fencedKeys(name)
	s := g.slot()
	guard := redisfence.New(s.rdb, redisfence.WithPrefix("tf:rec"))
	id := fmt.Sprintf("%s/%d/%d", g.w.em.id, h.id, g.w.fwrites.Add(1))
	wctx, cancel := context.WithTimeout(ctx, logBetween(g.rng, 5*time.Millisecond, 300*time.Millisecond))
	defer cancel()
	err := guard.Tx(wctx, token(f), "{"+name+"}", []string{data, log}, func(_ *redis.Tx, p redis.Pipeliner) error {
		p.Set(wctx, data, id, 0)
		p.RPush(wctx, log, strconv.FormatInt(f, 10)+" "+id)
		return nil
	})
	e := Event{K: kFWrite, Lease: h.id, Names: []string{name}, Fences: []int64{f}, Msg: id, EK: errKind(err)}
	if errors.Is(err, fence.ErrStale) {
		e.EK = "stale"
	}
	if err != nil {
		e.Err = err.Error()
	}
	g.emit(e)
}

// token is a fence.Token of a given fence.
type token int64

func (t token) Fence() int64 { return int64(t) }

// readFencedLogs records every log of the fenced store (after the workers
// are quiet).
func (r *runner) readFencedLogs() {
	rdb := r.srv.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := rdb.Keys(ctx, "tf:{*}:log").Result() // the run's own server: KEYS is fine here
	if err != nil {
		r.rec.add(Event{T: now(), K: kFatal, W: "parent", Msg: fmt.Sprintf("listing the fenced logs: %v", err)})
		return
	}
	for _, log := range logs {
		name := strings.TrimSuffix(strings.TrimPrefix(log, "tf:{"), "}:log")
		entries, err := rdb.LRange(ctx, log, 0, -1).Result()
		if err != nil {
			r.rec.add(Event{T: now(), K: kFatal, W: "parent", Msg: fmt.Sprintf("reading the fenced log of %q: %v", name, err)})
			continue
		}
		if len(entries) == 0 {
			continue
		}
		e := Event{T: now(), K: kFLog, W: "parent", Names: []string{name}}
		for _, en := range entries {
			fs, id, _ := strings.Cut(en, " ")
			v, _ := strconv.ParseInt(fs, 10, 64)
			e.Fences, e.Owners = append(e.Fences, v), append(e.Owners, id)
		}
		r.rec.add(e)
	}
}

// checkFencedStore checks the fenced store's logs against the writes.
func (h *history) checkFencedStore() []Violation {
	var vs []Violation
	in := map[string]int{} // write id -> times in its log
	for _, l := range h.flogs {
		name := l.Names[0]
		for i, f := range l.Fences {
			in[l.Owners[i]]++
			if i > 0 && f < l.Fences[i-1] {
				vs = append(vs, Violation{Kind: "fence", Cat: "fenced store: a lower fence accepted after a higher", T: l.T,
					Msg: fmt.Sprintf("%q: write %s with fence %d accepted after write %s with fence %d", name,
						l.Owners[i], f, l.Owners[i-1], l.Fences[i-1]), Related: []Event{l}})
			}
		}
	}
	for _, w := range h.fwrites {
		switch n := in[w.Msg]; {
		case w.EK == "" && n != 1:
			vs = append(vs, Violation{Kind: "fence", Cat: "fenced store: a committed write not in the store once", T: w.T,
				Msg:     fmt.Sprintf("%q: write %s (fence %d) was reported committed and is in the log %d times", w.Names[0], w.Msg, w.Fences[0], n),
				Related: []Event{w}})
		case w.EK == "stale" && n != 0:
			vs = append(vs, Violation{Kind: "fence", Cat: "fenced store: a write refused as stale was applied", T: w.T,
				Msg:     fmt.Sprintf("%q: write %s (fence %d) was refused as stale and is in the log", w.Names[0], w.Msg, w.Fences[0]),
				Related: []Event{w}})
		}
	}
	slices.SortFunc(vs, func(a, b Violation) int { return cmpInt(a.T, b.T) })
	return vs
}
