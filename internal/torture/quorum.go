//go:build unix

package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The RedLock world (issue 23, finding 8): three independent masters and,
// for each worker slot, a proxy to each of them, so that a node can be cut
// off from some workers and not others. qpart and qrestart run in the
// background: a partition or a restart outlasts the faults after it, and
// they overlap (a node cut off while another restarts empty, as in the
// finding). The checks are those of every exclusive lock: no two owners
// at once, fences that never repeat or go back, the ctx bound.
const (
	quorumNodes = 3
	// quorumTTLMax is the longest TTL a quorum lease can have: lockTTL's
	// 800 ms, extended by session up to 3 s.
	quorumTTLMax = 3 * time.Second
)

// quorumWorld is the parent's side of the RedLock world.
type quorumWorld struct {
	nodes   []*redistest.Server
	proxies [][]*faultproxy.Proxy // [node][worker slot]
	mu      sync.Mutex
	busy    []bool // a partition or restart of the node is in effect
	wg      sync.WaitGroup
}

// startQuorum starts the nodes (no persistence: a restart forgets
// everything) and the proxies.
func startQuorum(workers int) (*quorumWorld, error) {
	q := &quorumWorld{busy: make([]bool, quorumNodes)}
	for range quorumNodes {
		s, err := redistest.Start(redistest.Options{})
		if err != nil {
			q.close()
			return nil, err
		}
		q.nodes = append(q.nodes, s)
		var ps []*faultproxy.Proxy
		for range workers {
			p, err := faultproxy.New(s.Addr())
			if err != nil {
				q.close()
				return nil, err
			}
			ps = append(ps, p)
		}
		q.proxies = append(q.proxies, ps)
	}
	return q, nil
}

// addrs is what worker slot connects to: its proxy to each node.
func (q *quorumWorld) addrs(slot int) []string {
	var out []string
	for _, ps := range q.proxies {
		out = append(out, ps[slot].Addr())
	}
	return out
}

// settle waits until every partition has healed and every restarted node
// is back.
func (q *quorumWorld) settle() { q.wg.Wait() }

func (q *quorumWorld) close() {
	q.wg.Wait()
	for _, ps := range q.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	for _, s := range q.nodes {
		s.Close()
	}
}

// othersMarked reports whether every node but node holds its fence mark
// (internal/backend/doc.go, "Fences on a quorum"): the fences'
// argument assumes that no majority loses its counters before being
// marked again, so a node is restarted empty only when the others are
// marked. (Two nodes of three
// unmarked at once issue no fence again: the quorum grants nothing until
// an operator steps in, which the docs say.)
func (q *quorumWorld) othersMarked(node int) bool {
	for i, s := range q.nodes {
		if i == node {
			continue
		}
		c := s.Client()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := c.Exists(ctx, prefix+":quorum:mark").Result()
		cancel()
		c.Close()
		if err != nil || n != 1 {
			return false
		}
	}
	return true
}

// claim picks a node with nothing in effect and marks it, or returns -1.
func (q *quorumWorld) claim(rng *rand.Rand) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	var free []int
	for i, b := range q.busy {
		if !b {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return -1
	}
	i := free[rng.IntN(len(free))]
	q.busy[i] = true
	q.wg.Add(1)
	return i
}

// claimAll marks every node, if none has a fault in effect.
func (q *quorumWorld) claimAll() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.busy {
		if b {
			return false
		}
	}
	for i := range q.busy {
		q.busy[i] = true
		q.wg.Add(1)
	}
	return true
}

// cut cuts node off from every worker, or heals it.
func (q *quorumWorld) cut(node int, on bool) {
	for _, p := range q.proxies[node] {
		p.SetDown(on)
	}
}

// qsplit is finding 8 in the order a busy run cannot undo: node a is cut
// off from everyone while holds raise the fences on b and c; c is cut off
// too (no majority is left); b is killed, kept out past every quorum TTL
// and restarted empty; then a comes back: {a, b} is a majority in which
// a has missed the latest fences and b has lost all of its. A grant there
// with a fence issued before (or below one) is what the fence check sees.
// c comes back 1-3 s later. It runs synchronously, like handoff.
func (r *runner) qsplit(rng *rand.Rand) (string, error) {
	q := r.quorum
	for deadline := time.Now().Add(8 * time.Second); !q.claimAll(); {
		if time.Now().After(deadline) {
			return "qsplit: quorum faults were in effect for 8 s", nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer func() {
		for i := range q.busy {
			q.release(i)
		}
	}()
	order := rng.Perm(quorumNodes)
	a, b, c := order[0], order[1], order[2]
	if !q.othersMarked(b) {
		return fmt.Sprintf("qsplit: node %d left alone: another node is not marked again yet", b), nil
	}
	raise := between(rng, time.Second, 2500*time.Millisecond)
	out := quorumTTLMax + between(rng, 200*time.Millisecond, 1500*time.Millisecond)
	after := between(rng, time.Second, 3*time.Second)
	q.cut(a, true)
	time.Sleep(raise)
	q.cut(c, true)
	err := q.nodes[b].Kill()
	time.Sleep(out)
	if e := q.nodes[b].Restart(false); err == nil {
		err = e
	}
	q.cut(a, false)
	time.Sleep(after)
	q.cut(c, false)
	return fmt.Sprintf("qsplit: node %d cut off for %v, then node %d too; node %d killed, out %v, restarted empty; node %d back; node %d back %v later",
		a, raise.Round(time.Millisecond), c, b, out.Round(time.Millisecond), a, c, after.Round(time.Millisecond)), err
}

func (q *quorumWorld) release(node int) {
	q.mu.Lock()
	q.busy[node] = false
	q.mu.Unlock()
	q.wg.Done()
}

// quorumFault starts a qpart or qrestart and returns at once; its end is
// recorded as a fault event of its own.
func (r *runner) quorumFault(kind string, rng *rand.Rand) (string, error) {
	q := r.quorum
	node := q.claim(rng)
	if node < 0 {
		return kind + ": every node has a fault in effect", nil
	}
	switch kind {
	case "qpart":
		var cut []int
		for len(cut) == 0 {
			for w := range q.proxies[node] {
				if rng.IntN(2) == 0 {
					cut = append(cut, w)
				}
			}
		}
		d := between(rng, 300*time.Millisecond, 6*time.Second)
		if rng.IntN(2) == 0 { // cut off from everyone
			cut = cut[:0]
			for w := range q.proxies[node] {
				cut = append(cut, w)
			}
		}
		for _, w := range cut {
			q.proxies[node][w].SetDown(true)
		}
		go func() {
			defer q.release(node)
			time.Sleep(d)
			for _, w := range cut {
				q.proxies[node][w].SetDown(false)
			}
			r.rec.add(Event{T: now(), End: now(), K: kFault, W: "parent", Msg: fmt.Sprintf("qpart healed: node %d, worker slots %v", node, cut)})
		}()
		return fmt.Sprintf("qpart: node %d cut off from worker slots %v for %v", node, cut, d.Round(time.Millisecond)), nil
	default: // qrestart
		if !q.othersMarked(node) {
			q.release(node)
			return fmt.Sprintf("qrestart: node %d left alone: another node is not marked again yet", node), nil
		}
		out := quorumTTLMax + between(rng, 200*time.Millisecond, 1500*time.Millisecond)
		err := q.nodes[node].Kill()
		go func() {
			defer q.release(node)
			time.Sleep(out)
			msg := fmt.Sprintf("qrestart back: node %d restarted empty", node)
			if err := q.nodes[node].Restart(false); err != nil {
				msg += fmt.Sprintf(" (error: %v)", err)
			}
			r.rec.add(Event{T: now(), End: now(), K: kFault, W: "parent", Msg: msg})
		}()
		return fmt.Sprintf("qrestart: node %d killed, kept out %v (past every quorum TTL), then restarted without its data",
			node, out.Round(time.Millisecond)), err
	}
}

// redlock takes a RedLock Mutex on the quorum, with a TTL or a fixed
// lease, waiting or not, and holds it as the mix does: work, re-entry,
// Extend, TTL, then a release in any mode.
func (g *gor) redlock(ctx context.Context) {
	c := g.w.quorum
	if c == nil {
		sleepCtx(ctx, 50*time.Millisecond)
		return
	}
	name := g.pickName(quorumNames)
	opt, ttl, fixed := g.lockTTL()
	m := c.Mutex(name, opt)
	sp := spec{scn: "redlock", client: fmt.Sprintf("q%d", g.w.cfg.Slot), names: []string{name}, ttls: one(name, ttl), fixed: fixed}
	call := func(ctx context.Context) (*dlock.Lease, error) { return m.TryLock(ctx) }
	if g.rng.IntN(10) < 6 {
		sp.wait, sp.timeout = true, logBetween(g.rng, time.Millisecond, 400*time.Millisecond)
		call = func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }
	}
	h := g.acquire(ctx, sp, call)
	if h == nil {
		sleepCtx(ctx, logBetween(g.rng, time.Millisecond, 50*time.Millisecond))
		return
	}
	g.session(ctx, h, func(ctx context.Context) (*dlock.Lease, error) { return m.Lock(ctx) }, sp)
}
