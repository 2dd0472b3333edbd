package dlock

import (
	"context"
	"time"
)

// single is one Redis deployment that runs scripts: a server, a primary
// managed by Sentinel, or a cluster (sharded). With replica sync every
// grant is followed by WAIT on the connection that carried it.
type single struct {
	rdb     Driver
	sharded bool
	sync    replicaSync
}

func (s *single) run(ctx context.Context, o op) Reply { return o.run(ctx, s.rdb) }

func (s *single) caps() caps {
	return caps{all: true, reentry: true, handOff: s.sync.replicas == 0, reserve: true, directed: true, oneScript: !s.sharded, bury: true}
}
func (s *single) close() {}

func (s *single) everywhere(ctx context.Context, c call) error { return c.run(ctx, s.rdb).Err }

// handsOff: a released mutex can be handed to its next waiter, unless
// every grant must be followed by WAIT (replica sync), which the waiter
// must then send itself.

// attempt runs the request's acquire script; a lock handed over by its
// release (msg) is taken without one.
func (s *single) attempt(c *Client, r *request, token, member string, cfg lockConfig) (protocol, attemptFunc) {
	// last is the waiter's latest place (a hand-off names the place it
	// consumed: see "Hand-off" in handoff.go). Set, it also tells the next
	// attempt that it may have a place to give up (an attempt that ends
	// otherwise ends the acquire).
	var last place
	return r.p, func(ctx context.Context, queued bool, msg string) (*Lease, time.Duration, error) {
		if msg != "" {
			if l, err, ok := c.take(ctx, r, token, cfg, msg, last); ok {
				return l, 0, err
			}
		}
		m := ""
		if queued && r.queue {
			m = member
		}
		start := time.Now()
		res, err := fenceReply("lock", r.k.name, s.grant(ctx, r.call(token, m, !last.sent.IsZero(), cfg)))
		if err != nil {
			return nil, 0, err
		}
		if res[0] == replyBusy && m != "" {
			last = place{sent: start}
			if len(res) > 2 {
				last.expiry = res[2]
			}
		}
		switch res[0] {
		case replyHeld:
			h := newHold(c, r.k, r.what, r.p, token, res[1], cfg, start)
			h.side = r.side
			l, err := c.newLease(ctx, h)
			return l, 0, err
		case replyTooMany:
			return nil, 0, invalid("%s %q: %d permits asked for; its capacity is %d", r.what, r.k.name, r.need, res[1])
		}
		return nil, retryAfter(res[1], cfg.ttl), nil
	}
}

// grant runs a call that grants or extends a hold: with replica sync, WAIT
// follows it on the same connection, and too few acknowledgements turn a
// successful reply into an error matching ErrReplicaSync.
func (s *single) grant(ctx context.Context, o op) Reply {
	cl, ok := o.(call)
	if s.sync.replicas == 0 || !ok {
		return o.run(ctx, s.rdb)
	}
	return runBatch(ctx, s.rdb, []call{cl}, s.sync)[0] // on a connection of cl's node
}

// batch sends the calls in one pipeline (go-redis splits a cluster's per
// node), followed by WAIT for grants with replica sync. On a cluster with
// replica sync each grant goes on its own, as WAIT must follow each write
// on its node's connection.
func (s *single) batch(ctx context.Context, ops []op, grant bool) []Reply {
	sync := replicaSync{}
	if grant {
		sync = s.sync
	}
	if s.rdb.Info().Cluster && sync.replicas > 0 {
		out := make([]Reply, len(ops))
		for i, o := range ops {
			out[i] = s.grant(ctx, o)
		}
		return out
	}
	calls := make([]call, len(ops))
	for i, o := range ops {
		calls[i] = o.(call) // every op of a script deployment is a call
	}
	return runBatch(ctx, s.rdb, calls, sync)
}
