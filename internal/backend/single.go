package backend

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// single is one Redis deployment that runs scripts: a server, a primary
// managed by Sentinel, or a cluster (sharded). With replica sync every
// grant is followed by WAIT on the connection that carried it.
type single struct {
	rdb     driver.Driver
	sharded bool
	sync    ReplicaSync
	// unfolded: a folded call of renewals was refused (CROSSSLOT: a proxy
	// that shards the keys); renewals go one a call from then on.
	unfolded atomic.Bool
}

func (s *single) Run(ctx context.Context, o Op) driver.Reply { return o.Run(ctx, s.rdb) }

func (s *single) Caps() Caps {
	// A hand-off skips the waiter's own grant, which WAIT (replica sync)
	// must follow.
	return Caps{All: true, Reentry: true, HandOff: s.sync.Replicas == 0, Reserve: true, Directed: true, OneScript: !s.sharded, Bury: true}
}
func (s *single) Close() {}

func (s *single) Everywhere(ctx context.Context, c protocol.Call) error { return c.Run(ctx, s.rdb).Err }

// Attempt runs the lock's acquire script.
func (s *single) Attempt(a *AttemptSpec) (HoldOps, AttemptFunc) {
	return a.Ops, func(ctx context.Context, queued, placed bool) (Outcome, error) {
		m := ""
		if queued && a.Queue {
			m = a.Member
		}
		start := time.Now()
		var buf [4]int64 // the reply's words: {held, fence} or {busy, pttl, seen}
		r := s.Grant(ctx, a.Call(a.Token, m, placed, a.Cfg))
		res, err := FenceReply("lock", a.K.Name, r, buf[:])
		if err != nil {
			return Outcome{SentTwice: r.SentTwice}, err
		}
		switch res[0] {
		case protocol.ReplyHeld:
			return Outcome{Granted: true, Fence: res[1], Start: start, SentTwice: r.SentTwice}, nil
		case protocol.ReplyTooMany:
			return Outcome{}, errs.Invalid("%s %q: %d permits asked for; its capacity is %d", a.What, a.K.Name, a.Need, res[1])
		}
		o := Outcome{Wait: RetryAfter(res[1], a.Cfg.TTL), SentTwice: r.SentTwice}
		if res[0] == protocol.ReplyBusy && m != "" {
			o.Placed = Place{Sent: start}
			if len(res) > 2 {
				o.Placed.Seen, o.Placed.Named = res[2], true
			}
		}
		return o, nil
	}
}

// Grant runs a call that grants or extends a hold: with replica sync, WAIT
// follows it on the same connection, and too few acknowledgements turn a
// successful reply into an error matching errs.ReplicaSync.
func (s *single) Grant(ctx context.Context, o Op) driver.Reply {
	cl, ok := o.(protocol.Call)
	if s.sync.Replicas == 0 || !ok {
		return o.Run(ctx, s.rdb)
	}
	// A fast script's full call at once: a round more would WAIT again.
	return RunBatch(ctx, s.rdb, []protocol.Call{cl.Full()}, s.sync)[0] // on a connection of cl's node
}

// Batch sends the calls in one pipeline (go-redis splits a cluster's per
// node), followed by WAIT for grants with replica sync. On a cluster with
// replica sync each grant goes on its own, as WAIT must follow each write
// on its node's connection.
func (s *single) Batch(ctx context.Context, ops []Op, grant bool) []driver.Reply {
	sync := ReplicaSync{}
	if grant {
		sync = s.sync
	}
	if s.rdb.Info().Cluster && sync.Replicas > 0 {
		out := make([]driver.Reply, len(ops))
		for i, o := range ops {
			out[i] = s.Grant(ctx, o)
		}
		return out
	}
	calls := make([]protocol.Call, len(ops))
	for i, o := range ops {
		calls[i] = o.(protocol.Call) // every op of a script deployment is a call
		if sync.Replicas > 0 {
			calls[i] = calls[i].Full() // as Grant
		}
	}
	if !s.rdb.Info().Cluster && !s.unfolded.Load() {
		if folded, split := foldRenewals(calls); split != nil {
			rs := RunBatch(ctx, s.rdb, folded, sync)
			if !slices.ContainsFunc(rs, crossSlot) {
				return split(rs)
			}
			// A proxy that shards the keys refused a call of several (before
			// running any of it): each renewal again, alone (every call of
			// the batch is a renewal, which may run twice: foldRenewals).
			s.unfolded.Store(true)
		}
	}
	return RunBatch(ctx, s.rdb, calls, sync)
}

// NewSingle is one Redis deployment with scripts (a single node, a
// Sentinel-managed primary, a cluster: sharded pub/sub), rdb its driver
// stack, with replica sync if sync asks for it.
func NewSingle(rdb driver.Driver, sharded bool, sync ReplicaSync) Backend {
	return &single{rdb: rdb, sharded: sharded, sync: sync}
}
