package transport

import (
	"cmp"
	"context"
	"errors"
	"sync"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// pipelined is the Driver a Client talks to: the application's client's
// driver wrapped so that every call returns when its ctx ends, and so that
// single commands (script calls, mostly) from many goroutines share round
// trips. A driver that does either itself (driver.Info) is left to it:
// every built-in driver does both (go-redis on dlock's own connections,
// internal/wire; rueidisdlock and valkeydlock on their caller's
// goroutine), so what follows runs for the go-redis pool
// (WithoutOwnConnections) and for a user's driver.
//
// Bounded. go-redis made with its defaults (no ContextTimeoutEnabled)
// does not look at a ctx once a command is sent: it waits for the reply
// for its ReadTimeout, and retries, so a stalled or stopped server holds a
// caller for 3 to 15 s whatever its ctx says. Here every round trip runs
// on a goroutine of its own while the caller waits for its reply or its
// ctx, whichever comes first. A caller whose ctx ends first gets an error
// that matches ctx.Err() and is a *errs.Late: the command may still run on
// the server, and its Done closes when go-redis is done with it (a
// reply, or its own timeout). The acquire path waits for that before it
// undoes what the call may have granted (internal/acquisition/acquisition.go), so that the
// undoing cannot run on the server before the grant does. A result a
// caller gave up on is not read by anybody.
//
// Batched. While maxBatches batches are in flight, single commands (Do)
// from other goroutines queue; when one returns, the goroutine that sent
// it sends everything queued as the next pipeline. There is no timer: a
// lone call goes at once, on its own. A caller whose ctx ends while its
// call is still queued takes it back unsent. go-redis splits a pipeline
// per node on a cluster; a NOSCRIPT reply comes back to its caller, which
// sends the script with EVAL (not batched: rare).
type pipelined struct {
	driver.Driver
	bound    bool // the driver bounds its calls and batches them itself
	auto     bool // the driver batches calls itself, but does not bound them
	mu       sync.Mutex
	inflight int            // batches in flight
	queued   []*pendingCall // calls waiting for the next batch
}

// maxBatches is how many batches may be in flight at once: a call that
// finds fewer goes at once. More than one, so that a release (which hands
// a lock on) is not held up behind a batch of other goroutines' calls.
const maxBatches = 4

// pendingCall is one command, queued or sent.
type pendingCall struct {
	ctx   context.Context
	cmd   driver.Command
	reply driver.Reply
	done  chan struct{} // closed when reply is in
}

func newPipelined(d driver.Driver) *pipelined {
	if p, ok := d.(*pipelined); ok {
		return p
	}
	info := d.Info()
	return &pipelined{Driver: d, bound: info.CtxBound && info.AutoPipeline, auto: info.AutoPipeline && !info.CtxBound}
}

// A call whose ctx ended before Redis answered fails with an *errs.Late:
// the call may still run on the server, and its Done closes when its
// outcome is settled on this side (the client library has its reply or
// gave up on it). A driver that bounds its calls itself (internal/wire's)
// returns the same error.

// GaveUp reports whether err is an errs.Late's: the caller gave up on the
// call (see within), and must not read what the call writes.
func GaveUp(err error) bool {
	_, ok := errors.AsType[*errs.Late](err)
	return ok
}

// Settled returns a channel that closes when the call that failed with
// err can no longer run on the server, as far as this side can tell: at
// once, unless err is an errs.Late's.
func Settled(err error) <-chan struct{} {
	if l, ok := errors.AsType[*errs.Late](err); ok {
		return l.Done
	}
	return closedChan
}

// Closed returns a channel that is closed: the Settled of a call that
// cannot run on the server any more (one channel, made once).
func Closed() <-chan struct{} { return closedChan }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// FailedAll returns n replies that failed with err.
func FailedAll(n int, err error) []driver.Reply {
	out := make([]driver.Reply, n)
	for i := range out {
		out[i] = protocol.FailedReply(err)
	}
	return out
}

// within runs f, a round trip to Redis, and returns its result, or, when
// ctx ends first, the zero value and a *errs.Late while f goes on in the
// background. A ctx that has ended already sends nothing (an errs.Late that
// is settled at once). A ctx that
// cannot end runs f on the caller's goroutine.
func within[T any](ctx context.Context, f func() T) (T, error) {
	var zero T
	if ok, err := apart(ctx); !ok {
		if err != nil {
			return zero, err
		}
		return f(), nil
	}
	r := &outcome[T]{done: make(chan struct{})}
	go r.run(f)
	if err := await(ctx, r.done); err != nil {
		return zero, err
	}
	return r.v, nil
}

// apart reports whether a round trip within ctx runs on a goroutine of
// its own: not when ctx cannot end (it runs on the caller's), nor when ctx
// has ended (then err, a settled *errs.Late: nothing is sent).
func apart(ctx context.Context) (ok bool, err error) {
	if ctx.Done() == nil {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, &errs.Late{Err: err, Done: closedChan}
	}
	return true, nil
}

// outcome is a round trip's result, v, set before done is closed: one
// channel, which is also the Late's Done when the caller gives up first.
type outcome[T any] struct {
	v    T
	done chan struct{}
}

func (r *outcome[T]) run(f func() T) {
	r.v = f()
	close(r.done)
}

// await waits until done is closed (a round trip on another goroutine
// has its result), or returns a *errs.Late, settled when done closes, if
// ctx ends first. A result that came at the same time is preferred.
func await(ctx context.Context, done chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
		}
		return &errs.Late{Err: ctx.Err(), Done: done}
	}
}

// doCall is a command of an auto-pipelining driver that does not bound its
// calls run within its ctx (pipelined.Do): the command, its result and
// the channel that says it came, in two allocations, not within's four (a
// closure, its goroutine's, two channels), since it runs at every call of
// such a driver (a user's; the built-in ones bound their calls: go-redis
// on dlock's own connections, rueidis and valkey-go on their caller's
// goroutine since issue 47).
type doCall struct {
	d    driver.Driver
	ctx  context.Context
	c    driver.Command
	r    driver.Reply
	done chan struct{}
}

func (x *doCall) run() {
	x.r = x.d.Do(x.ctx, x.c)
	close(x.done)
}

// Do runs a command within ctx, batched with the commands of other
// goroutines when batches are in flight (unless the driver batches them
// itself).
func (p *pipelined) Do(ctx context.Context, c driver.Command) driver.Reply {
	switch {
	case p.bound:
		return p.Driver.Do(ctx, c)
	case p.auto:
		if ok, err := apart(ctx); !ok {
			if err != nil {
				return protocol.FailedReply(err)
			}
			return p.Driver.Do(ctx, c)
		}
		x := &doCall{d: p.Driver, ctx: ctx, c: c, done: make(chan struct{})}
		go x.run()
		if err := await(ctx, x.done); err != nil {
			return protocol.FailedReply(err)
		}
		return x.r
	}
	return p.batched(ctx, c)
}

// Pipeline runs a pipeline within ctx.
func (p *pipelined) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if p.bound {
		return p.Driver.Pipeline(ctx, cmds)
	}
	out, err := within(ctx, func() []driver.Reply { return p.Driver.Pipeline(ctx, cmds) })
	if err != nil {
		return FailedAll(len(cmds), err)
	}
	return out
}

// Dedicated runs fn on a dedicated connection within ctx. When ctx ends
// first, what fn writes must not be read: it may still be running.
func (p *pipelined) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	if p.bound {
		return p.Driver.Dedicated(ctx, key, fn)
	}
	err, late := within(ctx, func() error { return p.Driver.Dedicated(ctx, key, fn) })
	return cmp.Or(late, err)
}

// Masters lists a cluster's masters within ctx.
func (p *pipelined) Masters(ctx context.Context) ([]driver.Driver, error) {
	type result struct {
		ds  []driver.Driver
		err error
	}
	r, late := within(ctx, func() result {
		ds, err := p.Driver.Masters(ctx)
		return result{ds, err}
	})
	if late != nil {
		return nil, late
	}
	for i, d := range r.ds {
		r.ds[i] = newPipelined(d)
	}
	return r.ds, r.err
}

// batched runs a command, batched with those of other goroutines when
// batches are in flight, within ctx.
func (p *pipelined) batched(ctx context.Context, cmd driver.Command) driver.Reply {
	if err := ctx.Err(); err != nil {
		return protocol.FailedReply(err)
	}
	c := &pendingCall{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	p.mu.Lock()
	if p.inflight < maxBatches {
		// A slot is free: go at once, on its own.
		p.inflight++
		p.mu.Unlock()
		if ctx.Done() == nil {
			p.sendFrom(c) // nothing can end the wait: no goroutine needed
			return c.reply
		}
		go p.sendFrom(c)
	} else {
		p.queued = append(p.queued, c)
		p.mu.Unlock()
	}
	select {
	case <-c.done:
		return c.reply
	case <-ctx.Done():
	}
	// Take the call back if it is still queued; if it was sent, its reply
	// is left to come to nobody.
	p.mu.Lock()
	for i, q := range p.queued {
		if q == c {
			p.queued = append(p.queued[:i], p.queued[i+1:]...)
			p.mu.Unlock()
			return protocol.FailedReply(ctx.Err())
		}
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.reply // it came as ctx ended
	default:
	}
	return protocol.FailedReply(&errs.Late{Err: ctx.Err(), Done: c.done})
}

// sendFrom sends c on its own, then, while calls have queued meanwhile,
// sends them as the next batch; when none are queued the batch slot is
// free again.
func (p *pipelined) sendFrom(c *pendingCall) {
	p.sendOne(c) // not as a batch of one: that would cost a slice a call
	for batch := p.next(); len(batch) > 0; batch = p.next() {
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
		p.sendOne(batch[0])
		return
	}
	// One caller's ctx must not cut short the replies of the others.
	ctx := context.WithoutCancel(batch[0].ctx)
	cmds := make([]driver.Command, len(batch))
	for i, c := range batch {
		cmds[i] = c.cmd
	}
	for i, r := range p.Driver.Pipeline(ctx, cmds) {
		batch[i].reply = r
	}
	for _, c := range batch {
		close(c.done)
	}
}

// sendOne sends a call on its own, with its caller's ctx: go-redis then
// gives up a connection at once when it has ended (waiting for one in
// its pool, or, with ContextTimeoutEnabled, for a reply), and the
// caller, which has returned already, undoes what the call may have
// done once it is settled. It completes the call.
func (p *pipelined) sendOne(c *pendingCall) {
	c.reply = p.Driver.Do(c.ctx, c.cmd)
	close(c.done)
}
