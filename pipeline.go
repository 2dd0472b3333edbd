package dlock

import (
	"cmp"
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// pipelined is the Redis a Client talks to: the application's client
// wrapped so that every call returns when its ctx ends, and so that script
// calls from many goroutines share round trips.
//
// Bounded. go-redis made with its defaults (no ContextTimeoutEnabled)
// does not look at a ctx once a command is sent: it waits for the reply
// for its ReadTimeout, and retries, so a stalled or stopped server holds a
// caller for 3 to 15 s whatever its ctx says. Here every round trip runs
// on a goroutine of its own while the caller waits for its reply or its
// ctx, whichever comes first. A caller whose ctx ends first gets an error
// that matches ctx.Err() and is a *lateCall: the command may still run on
// the server, and lateCall.done closes when go-redis is done with it (a
// reply, or its own timeout). The acquire path waits for that before it
// undoes what the call may have granted (wait.go), so that the undoing
// cannot run on the server before the grant does. A result a caller gave
// up on is not read by anybody.
//
// Batched. While maxBatches batches are in flight, script calls (EVALSHA)
// from other goroutines queue; when one returns, the goroutine that sent
// it sends everything queued as the next pipeline. There is no timer: a
// lone call goes at once, on its own. A caller whose ctx ends while its
// call is still queued takes it back unsent. go-redis splits a pipeline
// per node on a cluster; a NOSCRIPT reply comes back to its caller, which
// sends the script with EVAL (not batched: rare).
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

// pendingCall is one EVALSHA, queued or sent.
type pendingCall struct {
	ctx  context.Context
	sha  string
	keys []string
	args []any
	cmd  *redis.Cmd
	done chan struct{} // closed when cmd has its reply
}

func newPipelined(r Redis) *pipelined {
	if p, ok := r.(*pipelined); ok {
		return p
	}
	return &pipelined{Redis: r}
}

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

// lateCall is the error of a call whose ctx ended before Redis answered.
// The call may still run on the server: done closes when its outcome is
// settled on this side (go-redis has its reply or gave up on it).
type lateCall struct {
	err  error // ctx.Err()
	done <-chan struct{}
}

func (e *lateCall) Error() string { return e.err.Error() }
func (e *lateCall) Unwrap() error { return e.err }

// gaveUp reports whether err is a lateCall's: the caller gave up on the
// call (see within), and must not read what the call writes.
func gaveUp(err error) bool {
	_, ok := errors.AsType[*lateCall](err)
	return ok
}

// settled returns a channel that closes when the call that failed with
// err can no longer run on the server, as far as this side can tell: at
// once, unless err is a lateCall's.
func settled(err error) <-chan struct{} {
	if l, ok := errors.AsType[*lateCall](err); ok {
		return l.done
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// within runs f, a round trip to Redis, and returns its result, or, when
// ctx ends first, the zero value and a *lateCall while f goes on in the
// background. A ctx that has ended already sends nothing (a lateCall that
// is settled at once). A ctx that
// cannot end runs f on the caller's goroutine.
func within[T any](ctx context.Context, f func() T) (T, error) {
	var zero T
	if ctx.Done() == nil {
		return f(), nil
	}
	if err := ctx.Err(); err != nil {
		return zero, &lateCall{err: err, done: closedChan}
	}
	out := make(chan T, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out <- f()
	}()
	select {
	case r := <-out:
		return r, nil
	case <-ctx.Done():
		// The reply may have come at the same time: prefer it.
		select {
		case r := <-out:
			return r, nil
		default:
		}
		return zero, &lateCall{err: ctx.Err(), done: done}
	}
}

// failed returns a command that failed with err.
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// cmdWithin runs a call that returns a *redis.Cmd within ctx (see within).
func cmdWithin(ctx context.Context, f func() *redis.Cmd) *redis.Cmd {
	cmd, err := within(ctx, f)
	if err != nil {
		return failed(ctx, err)
	}
	return cmd
}

// Eval runs a script sent whole, within ctx.
func (p *pipelined) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return cmdWithin(ctx, func() *redis.Cmd { return p.Redis.Eval(ctx, script, keys, args...) })
}

// Do runs a command within ctx.
func (p *pipelined) Do(ctx context.Context, args ...any) *redis.Cmd {
	return cmdWithin(ctx, func() *redis.Cmd { return p.Redis.Do(ctx, args...) })
}

// Pipelined runs a pipeline within ctx. When ctx ends first, the commands
// that fn queued must not be read: their replies may still be coming.
func (p *pipelined) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return pipelineWithin(ctx, fn, p.Redis.Pipelined)
}

// TxPipelined runs a transaction within ctx (see Pipelined).
func (p *pipelined) TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	return pipelineWithin(ctx, fn, p.Redis.TxPipelined)
}

// Watch runs an optimistic transaction within ctx. When ctx ends first, what
// fn writes must not be read: it may still be running.
func (p *pipelined) Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error {
	err, late := within(ctx, func() error { return p.Redis.Watch(ctx, fn, keys...) })
	return cmp.Or(late, err)
}

func pipelineWithin(ctx context.Context, fn func(redis.Pipeliner) error,
	run func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error)) ([]redis.Cmder, error) {
	type result struct {
		cmds []redis.Cmder
		err  error
	}
	r, late := within(ctx, func() result {
		cmds, err := run(ctx, fn)
		return result{cmds, err}
	})
	return r.cmds, cmp.Or(late, r.err) // late: r is zero
}

// unwrap returns the client under it (see raw).
func (p *pipelined) unwrap() Redis { return p.Redis }

// EvalSha runs the script call, batched with the calls of other
// goroutines when batches are in flight, within ctx.
func (p *pipelined) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return failed(ctx, err)
	}
	c := &pendingCall{ctx: ctx, sha: sha, keys: keys, args: args, done: make(chan struct{})}
	p.mu.Lock()
	if p.inflight < maxBatches {
		// A slot is free: go at once, on its own.
		p.inflight++
		p.mu.Unlock()
		if ctx.Done() == nil {
			p.sendFrom(c) // nothing can end the wait: no goroutine needed
			return c.cmd
		}
		go p.sendFrom(c)
	} else {
		p.queued = append(p.queued, c)
		p.mu.Unlock()
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	// Take the call back if it is still queued; if it was sent, its reply
	// is left to come to nobody.
	p.mu.Lock()
	for i, q := range p.queued {
		if q == c {
			p.queued = append(p.queued[:i], p.queued[i+1:]...)
			p.mu.Unlock()
			return failed(ctx, ctx.Err())
		}
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd // it came as ctx ended
	default:
	}
	return failed(ctx, &lateCall{err: ctx.Err(), done: c.done})
}

// sendFrom sends c on its own, then, while calls have queued meanwhile,
// sends them as the next batch; when none are queued the batch slot is
// free again.
func (p *pipelined) sendFrom(c *pendingCall) {
	for batch := []*pendingCall{c}; len(batch) > 0; batch = p.next() {
		p.send(batch)
	}
}

// next takes the calls queued for the next batch, or frees the slot.
func (p *pipelined) next() []*pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.queued
	p.queued = nil
	if len(next) == 0 {
		p.inflight--
	}
	return next
}

// send sends a batch — one call on its own, several as one pipeline — and
// completes its calls.
func (p *pipelined) send(batch []*pendingCall) {
	if len(batch) == 1 {
		// A call on its own goes with its caller's ctx: go-redis then
		// gives up a connection at once when it has ended (waiting for
		// one in its pool, or, with ContextTimeoutEnabled, for a reply),
		// and the caller, which has returned already, undoes what the
		// call may have done once it is settled.
		c := batch[0]
		c.cmd = p.Redis.EvalSha(c.ctx, c.sha, c.keys, c.args...)
	} else {
		// One caller's ctx must not cut short the replies of the others.
		ctx := context.WithoutCancel(batch[0].ctx)
		_, _ = p.Redis.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for _, c := range batch {
				c.cmd = pl.EvalSha(ctx, c.sha, c.keys, c.args...)
			}
			return nil
		})
	}
	for _, c := range batch {
		close(c.done)
	}
}
