package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// single is one Redis deployment that runs scripts: a server, a primary
// managed by Sentinel, or a cluster (sharded). With replica sync every
// grant is followed by WAIT on the connection that carried it.
type single struct {
	rdb     driver.Driver
	sharded bool
	sync    replicaSync
}

func (s *single) run(ctx context.Context, o op) driver.Reply { return o.Run(ctx, s.rdb) }

func (s *single) caps() caps {
	// A hand-off skips the waiter's own grant, which WAIT (replica sync)
	// must follow.
	return caps{all: true, reentry: true, handOff: s.sync.replicas == 0, reserve: true, directed: true, oneScript: !s.sharded, bury: true}
}
func (s *single) close() {}

func (s *single) everywhere(ctx context.Context, c protocol.Call) error { return c.Run(ctx, s.rdb).Err }

// attempt runs the lock's acquire script.
func (s *single) attempt(a *attemptSpec) (holdOps, attemptFunc) {
	return a.p, func(ctx context.Context, queued, placed bool) (outcome, error) {
		m := ""
		if queued && a.queue {
			m = a.member
		}
		start := time.Now()
		res, err := fenceReply("lock", a.k.Name, s.grant(ctx, a.call(a.token, m, placed, a.cfg)))
		if err != nil {
			return outcome{}, err
		}
		switch res[0] {
		case protocol.ReplyHeld:
			return outcome{granted: true, fence: res[1], start: start}, nil
		case protocol.ReplyTooMany:
			return outcome{}, invalid("%s %q: %d permits asked for; its capacity is %d", a.what, a.k.Name, a.need, res[1])
		}
		o := outcome{wait: retryAfter(res[1], a.cfg.ttl)}
		if res[0] == protocol.ReplyBusy && m != "" {
			o.placed = place{sent: start}
			if len(res) > 2 {
				o.placed.seen, o.placed.named = res[2], true
			}
		}
		return o, nil
	}
}

// grant runs a call that grants or extends a hold: with replica sync, WAIT
// follows it on the same connection, and too few acknowledgements turn a
// successful reply into an error matching ErrReplicaSync.
func (s *single) grant(ctx context.Context, o op) driver.Reply {
	cl, ok := o.(protocol.Call)
	if s.sync.replicas == 0 || !ok {
		return o.Run(ctx, s.rdb)
	}
	return runBatch(ctx, s.rdb, []protocol.Call{cl}, s.sync)[0] // on a connection of cl's node
}

// batch sends the calls in one pipeline (go-redis splits a cluster's per
// node), followed by WAIT for grants with replica sync. On a cluster with
// replica sync each grant goes on its own, as WAIT must follow each write
// on its node's connection.
func (s *single) batch(ctx context.Context, ops []op, grant bool) []driver.Reply {
	sync := replicaSync{}
	if grant {
		sync = s.sync
	}
	if s.rdb.Info().Cluster && sync.replicas > 0 {
		out := make([]driver.Reply, len(ops))
		for i, o := range ops {
			out[i] = s.grant(ctx, o)
		}
		return out
	}
	calls := make([]protocol.Call, len(ops))
	for i, o := range ops {
		calls[i] = o.(protocol.Call) // every op of a script deployment is a call
	}
	return runBatch(ctx, s.rdb, calls, sync)
}
