package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Folding fence counters. A Client takes fences from the counters of its
// layout (internal/protocol/doc.go, "Fence counters"): one shared by every lock, or one per
// cluster slot (WithSlotFences). Other counters may hold fences already
// given for the same locks: an older dlock's, one per lock name
// (<lock>:fence), and those of the other layout, when a deployment
// switched (moved to a cluster, or WithSlotFences changed). Before its
// first fence a Client adds every such counter's value to its own
// counters that count for the same locks and deletes it, on every master
// (foldKeys), then leaves a mark,
// <prefix>:fence:folded = its layout, so that later Clients of the same
// layout read one key and go on.
//
// Why no fence repeats: a fence of the other counter is at most its
// value, which is added to the counter of the lock's slot (or the shared
// one) before the other is deleted; counters never go down, so every
// later fence is above it. A Client that does not see the mark folds
// before its first fence, so none is taken from an unfolded counter.
// What this cannot cover: Clients of an older dlock, or of the other
// layout, that keep taking fences of the same locks after the fold (a
// rolling upgrade that mixes them, a switch of WithSlotFences while the
// old Clients run): their counters are not read again, and their fences
// repeat. Stop them before starting Clients of this layout; a fold that
// finds the other layout's mark says so in a warning. (Making the mix
// safe would have every script that takes a fence read the other
// layout's counter too, which a cluster's CROSSSLOT forbids for the
// shared one.)

// foldMark is the key of the mark, and the layouts' names it holds.
func foldMark(prefix string) string { return prefix + ":fence:folded" }

const (
	layoutShared = "shared"
	layoutSlots  = "slots"
)

// foldTimeout bounds one fold (a SCAN of every master).
const foldTimeout = time.Minute

// foldRun is one fold in progress: done closes when it has ended, with err.
type foldRun struct {
	done chan struct{}
	err  error
}

// foldFences folds the other layouts' counters into this Client's, once
// per Client (on every node of a quorum). The fold runs in the background
// under the Client's life and foldTimeout, not under the ctx of the
// acquire that needs it: a SCAN of a large keyspace can outlast a short
// ctx, and acquires with short ctxs, each starting a fold of its own,
// would never finish one. Every acquire meanwhile waits for the same fold
// within its own ctx. An error leaves it to the next acquire. A quorum
// goes on with a node it could not fold (down, or too slow for the node
// timeout) and folds it at a later acquire, or before a Lock's next
// round (Fold); meanwhile its fences count only the nodes folded, and a
// round with no majority of them issues none (the backend's quorum.go,
// "Fences on a quorum": a fence from two folded nodes and three unfolded
// ones went back below the older ones).
func (d *Deployment) foldFences(ctx context.Context) error {
	if d.folded.Load() {
		return nil
	}
	d.foldMu.Lock()
	run := d.folding
	if run == nil {
		run = &foldRun{done: make(chan struct{})}
		if !d.reach.Background(func() {
			fctx, cancel := context.WithTimeout(d.reach.Life, foldTimeout)
			defer cancel()
			run.err = d.foldAll(fctx)
			if run.err == nil {
				d.folded.Store(true)
			}
			d.foldMu.Lock()
			d.folding = nil
			d.foldMu.Unlock()
			close(run.done)
		}) {
			d.foldMu.Unlock()
			return errs.Closed
		}
		d.folding = run
	}
	d.foldMu.Unlock()
	select {
	case <-run.done:
		return run.err
	case <-ctx.Done():
		return redisErr("fold fence counters", d.prefix+":fence", ctx.Err())
	}
}

// Fold folds the fence counters as Check does (nothing once the fold is
// done): a quorum's Lock calls it before a round that follows one that
// could not issue a fence (a node's fold failed), and goes on whatever
// it returns (the round counts only the nodes folded).
func (d *Deployment) Fold(ctx context.Context) error { return d.foldFences(ctx) }

// foldAll is one fold, on every node.
func (d *Deployment) foldAll(ctx context.Context) error {
	layout := layoutShared
	if d.reach.Fence == "" {
		layout = layoutSlots
	}
	failed := make([]error, len(d.reach.Nodes))
	var wg sync.WaitGroup
	for i, n := range d.reach.Nodes {
		wg.Go(func() {
			failed[i] = d.foldNode(ctx, n, layout)
			if d.reach.Folds != nil {
				d.reach.Folds.Set(i, failed[i]) // after the node's counters were raised
			}
		})
	}
	wg.Wait()
	if err := errors.Join(failed...); err != nil {
		return redisErr("fold fence counters", d.prefix+":fence", err)
	}
	return nil
}

// foldNode folds the counters of one deployment (one node of a quorum),
// unless its mark says it was done for layout.
func (d *Deployment) foldNode(ctx context.Context, r driver.Driver, layout string) error {
	mark := foldMark(d.prefix)
	// A quorum node that does not answer within the node timeout (a
	// stopped one) is left for a later acquire, not waited for: every
	// acquire waits for this fold.
	gctx, cancel := d.nodeCtx(ctx)
	defer cancel()
	got := r.Do(gctx, protocol.Keyed("GET", mark))
	if got.Err != nil {
		return got.Err
	} else if got.Val == layout {
		if layout == layoutShared {
			d.counterLost(ctx, r)
		}
		return nil
	} else if got.Val == layoutShared || got.Val == layoutSlots {
		// Clients of the other layout ran: those still running take
		// fences from counters this fold deletes and nobody reads again
		d.warnOnce("layout", "dlock: fence counters of the other WithSlotFences layout were in use: "+
			"a Client of that layout still running repeats fences; stop them all before starting Clients of this one",
			"prefix", d.prefix, "was", got.Val, "now", layout)
	}
	nodes, err := r.Masters(ctx)
	if err != nil {
		return err
	}
	failed := make([]error, len(nodes))
	var denied atomic.Bool
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			failed[i] = ScanKeys(ctx, n, EscapeGlob(d.prefix)+":*fence*", func(keys []string) error {
				some, err := d.foldKeys(ctx, r, keys)
				if some {
					denied.Store(true)
				}
				return err
			})
		})
	}
	wg.Wait()
	if err := errors.Join(failed...); err != nil {
		return err
	}
	if denied.Load() {
		// Counters of locks this Client's ACL user may not touch, so may
		// not take either: a Client of a user who may folds them (the
		// mark is not left until then).
		d.warnOnce("fold", "dlock: the ACL user may not read some older fence counters (of locks it cannot take); a Client of a user who may read them folds them", "prefix", d.prefix)
		return nil
	}
	if layout == layoutShared {
		// the counter is there before the mark (counterLost)
		if err := r.Do(ctx, protocol.Keyed("INCRBY", d.reach.Fence, 0)).Err; err != nil {
			return err
		}
	}
	return r.Do(ctx, protocol.Keyed("SET", mark, layout)).Err
}

// counterLost warns once when the shared fence counter is gone though the
// fold's mark is there: a fold leaves the counter (at 0 if no fence was
// taken yet) before its mark, so the counter was deleted since, and every
// lock's fences restart at 1 (guarantees.md, "One key holds every lock's
// fences"). Only a Client's fold looks, once: a Client running when the
// counter goes does not notice, nor does any Client once the next fence
// has made the counter again, nor one after the mark went too (a
// FLUSHDB, a restart without AOF). A mark left by an older dlock, which
// did not leave the counter, may be warned about if no fence was ever
// taken. Per slot counters are made as used, so a lost one is not told
// from one not used yet.
func (d *Deployment) counterLost(ctx context.Context, r driver.Driver) {
	n, err := r.Do(ctx, protocol.Keyed("EXISTS", d.reach.Fence)).Int64()
	if err == nil && n == 0 {
		d.warnOnce("counter", "dlock: the fence counter is gone though fences were taken from it: "+
			"every lock's fences restart at 1, and may repeat fences given before (was the key deleted?)",
			"prefix", d.prefix, "counter", d.reach.Fence)
	}
}

// foldKeys folds those of keys that are counters of another layout (and
// says whether the ACL user was denied some of them). A counter is
// recognised by its exact name (legacyFence, the shared one, slotCounter)
// and by what it holds, an integer in a string: another deployment's keys
// can share the pattern (a prefix "app:fence" names its locks
// app:fence:{<name>}), and a key that is not a counter is neither read
// for a fence nor deleted. It
// reads each, adds its value to the counter (or counters) of this layout
// that count for the same locks, then deletes it. Adding (INCRBY) rather
// than raising to the value needs no script (WithoutScripts folds too),
// and leaves the counter above the value whatever it was, as a raise
// would; fences only have to grow.
func (d *Deployment) foldKeys(ctx context.Context, r driver.Driver, keys []string) (denied bool, err error) {
	slots := d.reach.Fence == ""
	var olds []string
	var into [][]string // the counters each old one counts for
	for _, key := range keys {
		switch {
		case legacyFence(d.prefix, key):
			// an older dlock's counter of one lock
			olds, into = append(olds, key), append(into, []string{protocol.FenceKey(d.prefix, key, slots)})
		case key == protocol.FenceKey(d.prefix, "", false) && slots:
			// the shared counter, on a deployment now counting per slot
			all := make([]string, keyslot.Slots)
			for s := range all {
				all[s] = protocol.FenceKey(d.prefix, keyslot.Tag(s), true) // a tag's slot is the slot it names
			}
			olds, into = append(olds, key), append(into, all)
		case slotCounter(d.prefix, key) && !slots:
			// a slot's counter, on a deployment now sharing one
			olds, into = append(olds, key), append(into, []string{d.reach.Fence})
		}
	}
	if len(olds) == 0 {
		return false, nil
	}
	gets := make([]driver.Command, len(olds))
	for i, k := range olds {
		gets[i] = protocol.Keyed("GET", k)
	}
	vals := r.Pipeline(ctx, gets)
	for _, v := range vals {
		if NoPerm(v.Err) {
			denied = true
		} else if v.Err != nil && !wrongType(v.Err) {
			return false, v.Err
		}
	}
	// each counter gets the highest of the old ones it counts for
	var adds, dels []driver.Command
	high := map[string]int64{}
	for i, k := range olds {
		v, err := vals[i].Int64()
		if err != nil {
			// gone meanwhile (folded by another Client), or not a
			// counter: a hash (WRONGTYPE) or a string that is no
			// integer, another prefix's (foldKeys's doc)
			continue
		}
		for _, counter := range into[i] {
			if v > high[counter] {
				if _, ok := high[counter]; !ok {
					adds = append(adds, protocol.Keyed("INCRBY", counter))
				}
				high[counter] = v
			}
		}
		dels = append(dels, protocol.Keyed("DEL", k))
	}
	for i, a := range adds {
		adds[i].Args = append(a.Args, high[a.Args[1].(string)])
	}
	if len(adds) == 0 {
		return denied, nil
	}
	// every counter is raised before any old one goes
	if err := pipelineErr(r.Pipeline(ctx, adds)); err != nil {
		return false, err
	}
	return denied, pipelineErr(r.Pipeline(ctx, dels))
}

// slotCounter reports whether key is exactly the name of one of prefix's
// counters per slot: <prefix>:fence:{<tag>}, where tag is keyslot.Tag of
// a slot, as protocol.FenceKey makes it. Any other <prefix>:fence:{...} key is not
// the fold's: another deployment's whose prefix is <prefix>:fence (its
// locks, its Semaphores' capacities, a fence guard's records).
func slotCounter(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix+":fence:{")
	if !ok {
		return false
	}
	tag, ok := strings.CutSuffix(rest, "}")
	if !ok || tag == "" || len(tag) > 4 || strings.ContainsAny(tag, "{}") {
		return false
	}
	return keyslot.Tag(keyslot.Of(tag)) == tag
}

// wrongType reports whether err is Redis's refusal of a command on a key
// of another type.
func wrongType(err error) bool {
	return err != nil && IsReply(err) && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// legacyFence reports whether key is an older dlock's fence counter of
// one lock: <prefix>:{<name>}[:<kind>]:fence.
func legacyFence(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '}') // a name's '}' is escaped: this ends the tag
	if i < 0 {
		return false
	}
	switch rest[i+1:] {
	case ":fence", ":rw:fence", ":sem:fence", ":latch:fence", ":election:fence":
		return true
	}
	return false
}

// pipelineErr is the first error among replies.
func pipelineErr(rs []driver.Reply) error {
	for _, x := range rs {
		if x.Err != nil {
			return x.Err
		}
	}
	return nil
}

// ScanKeys SCANs one node for the keys that match pattern, giving them to
// fn a page at a time.
func ScanKeys(ctx context.Context, r driver.Driver, pattern string, fn func([]string) error) error {
	cursor := "0"
	for {
		v, err := r.Do(ctx, protocol.Cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)).Slice()
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("dlock: SCAN: unexpected reply")
		}
		cursor, _ = v[0].(string)
		page, _ := v[1].([]any)
		keys := make([]string, 0, len(page))
		for _, k := range page {
			if s, ok := k.(string); ok {
				keys = append(keys, s)
			}
		}
		if err := fn(keys); err != nil {
			return err
		}
		if cursor == "0" || cursor == "" {
			return nil
		}
	}
}

// globEscaper escapes what SCAN's MATCH would read as a pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// EscapeGlob escapes s for a SCAN's MATCH pattern: it matches s alone.
func EscapeGlob(s string) string { return globEscaper.Replace(s) }

// redisErr wraps an error from Redis with what dlock was doing (as the
// root's redisErr).
func redisErr(op, name string, err error) error {
	return fmt.Errorf("dlock: %s %q: %w", op, name, err)
}
