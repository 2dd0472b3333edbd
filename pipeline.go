package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// pipelined is a Redis whose script calls (EVALSHA) from many goroutines
// share round trips: while maxBatches batches are in flight, calls from
// other goroutines queue; when one returns, everything queued goes as the
// next pipeline. There is no timer: a lone call goes at once, on its own. The
// caller that finds a batch slot free leads — it sends its batch and,
// when the replies are in, hands the lead to the first caller still
// waiting, with everything queued meanwhile — so no goroutine is added
// and none is left behind.
//
// A caller whose ctx ends while its call is still queued takes it back
// unsent, and returns ctx's error; once sent, a call runs to its reply
// (the acquire path undoes an acquire whose reply it gave up on, as for
// any call). go-redis splits a pipeline per node on a cluster; a NOSCRIPT
// reply comes back to its caller, which sends the script with EVAL (not
// batched: rare). Everything else passes through to the client.
type pipelined struct {
	Redis
	mu       sync.Mutex
	inflight int            // batches in flight
	queued   []*pendingCall // calls waiting for the next batch
}

// maxBatches is how many batches may be in flight at once: a call that
// finds fewer goes at once. More than one, so that a release (which hands
// a lock on) is not held up behind a batch of other goroutines' calls.
const maxBatches = 4

// pendingCall is one queued EVALSHA.
type pendingCall struct {
	ctx  context.Context
	sha  string
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{}       // closed when cmd has its reply
	lead chan []*pendingCall // this caller leads: the batch to send, itself first
}

func newPipelined(r Redis) *pipelined { return &pipelined{Redis: r} }

// raw is the client under dlock's wrappers (pipelined, reporter), for what
// asks which kind of client it has (a cluster's).
func raw(r Redis) Redis {
	for {
		w, ok := r.(interface{ unwrap() Redis })
		if !ok {
			return r
		}
		r = w.unwrap()
	}
}

// unwrap returns the client under it (see raw).
func (p *pipelined) unwrap() Redis { return p.Redis }

// EvalSha runs the script call, batched with the calls of other
// goroutines when a batch is in flight.
func (p *pipelined) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	p.mu.Lock()
	if p.inflight < maxBatches {
		// A slot is free: go at once, on its own.
		p.inflight++
		p.mu.Unlock()
		cmd := p.Redis.EvalSha(ctx, sha, keys, args...)
		p.passLead()
		return cmd
	}
	c := &pendingCall{ctx: ctx, sha: sha, keys: keys, args: args,
		done: make(chan struct{}), lead: make(chan []*pendingCall, 1)}
	p.queued = append(p.queued, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case batch := <-c.lead:
		p.send(batch)
		return c.cmd
	case <-ctx.Done():
	}
	// Take the call back if it is still queued; if a leader took it
	// already, it is sent (or this caller leads): see it through.
	p.mu.Lock()
	for i, q := range p.queued {
		if q == c {
			p.queued = append(p.queued[:i], p.queued[i+1:]...)
			p.mu.Unlock()
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(ctx.Err())
			return cmd
		}
	}
	p.mu.Unlock()
	select {
	case <-c.done:
	case batch := <-c.lead:
		p.send(batch)
	}
	return c.cmd
}

// send sends a batch — one call on its own, several as one pipeline —
// completes its calls, then hands the lead on with what was queued
// meanwhile, or ends the busy spell.
func (p *pipelined) send(batch []*pendingCall) {
	defer p.passLead()
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = p.Redis.EvalSha(c.ctx, c.sha, c.keys, c.args...)
	} else {
		// The pipeline carries the calls of several callers: a ctx that
		// ends must not cut the others' replies short (each call's own
		// ctx was checked while it was queued; go-redis's timeouts bound
		// the round trip).
		ctx := context.WithoutCancel(batch[0].ctx)
		_, _ = p.Redis.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, c := range batch {
				c.cmd = pl.EvalSha(ctx, c.sha, c.keys, c.args...)
			}
			return nil
		})
	}
	for _, c := range batch[1:] {
		close(c.done)
	}
}

// passLead ends a batch: the first caller queued meanwhile leads the next,
// with everything queued; or, if none, the batch's slot is free again.
func (p *pipelined) passLead() {
	p.mu.Lock()
	next := p.queued
	p.queued = nil
	if len(next) == 0 {
		p.inflight--
	}
	p.mu.Unlock()
	if len(next) > 0 {
		next[0].lead <- next
	}
}
