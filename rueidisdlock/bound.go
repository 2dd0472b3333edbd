package rueidisdlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/redis/rueidis"
)

// How a call is bounded by its ctx on the caller's goroutine, and how a
// call given up on is known to be settled (see the package doc).
//
// rueidis's Do, handed the caller's ctx, puts the command in the ring of
// one of the node's connections and waits for its reply or for ctx to
// end, whichever comes first; when ctx ends first it returns ctx.Err()
// and leaves the reply to a goroutine of its own. So the caller returns
// on time with no goroutine of dlock's. What rueidis does not tell is
// when that command can no longer run on the server. But a connection's
// replies come in the order of its commands, and every command the
// driver sends on a node goes on the same connection (build: no slot on
// a single node's client, whose commands without one all go on its first
// connection; a cluster's client keeps one connection per node unless
// ClientOption.PipelineMultiplex says otherwise). So a PING sent after
// the call gave up, on the same connection, is answered only once the
// given-up command has been answered, or fails when that connection
// fails (its commands' outcomes then are what the connection's death
// leaves them, as on go-redis): its return is the call's settlement.
// That probe is the one goroutine, on the rare path only; the probes of
// calls given up together are one (settler).
//
// One wait in rueidis no ctx bounds: a connection being dialed anew. A
// call that finds its connection broken makes rueidis dial another, and
// waits for it, HELLO and all, for rueidis's own timeouts whatever its
// ctx says (and every call that comes meanwhile waits for that dial). So
// once the driver has seen a call fail on its connection, its calls whose
// ctx can end run on a goroutine of their own, as every call did before
// (apart), until one of them has had a reply: the connection is up again
// (redial).

// queued returns the ctx a command is handed to rueidis with: ctx
// without its deadline, which still ends at it (Done closes). Given a
// deadline on an idle connection, rueidis writes and reads the command on
// the caller's goroutine with the deadline on the socket, does not
// watch Done meanwhile (a cancel is not seen), and closes the connection
// when the deadline passes, while the command may still run; without
// one, it always queues the command for the connection's writer and
// waits for Done or the reply. A ctx without a deadline is handed as it
// is (no allocation): one that cannot end rueidis reads on the caller's
// goroutine, as it should.
func queued(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok {
		return ctx
	}
	return noDeadline{ctx}
}

// noDeadline is a ctx without its deadline (see queued).
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// gaveUp reports whether rueidis returned err because ctx ended: the
// command may still be in a connection's ring, written, or running. An
// error reply is the server's answer, never a give-up.
func gaveUp(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && !isReply(err)
}

// maxUnsettled is how many of the driver's calls may be unsettled at once
// (sent and not yet answered, given up on or not). rueidis's Do waits for
// a free place in its connection's ring without looking at ctx (1 024
// places with ClientOption.RingScaleEachConn at its default), and a call
// given up on keeps its place until the server answers: against a
// stopped server, enough calls would fill the ring and a caller would
// wait for the server whatever its ctx said. Past this many, a call waits
// for a place here, where its ctx bounds the wait.
const maxUnsettled = 512

// settler sends the probes that say when the calls given up on are
// settled, one at a time, each for every call given up since the one
// before was sent, from one goroutine that runs while there are some. It
// also keeps the count of unsettled calls (maxUnsettled).
type settler struct {
	client  rueidis.CoreClient
	cluster bool
	places  chan struct{} // one per unsettled call

	mu      sync.Mutex // guards what follows
	next    *probe     // the calls given up since the last probe was sent
	running bool       // run is sending probes
}

// probe is what one PING (a PING per node on a cluster) settles.
type probe struct {
	done  chan struct{}  // closed when the PINGs have returned
	calls int            // places to give back then
	slots map[int]string // cluster: a key of each slot given up on
}

func newSettler(client rueidis.CoreClient, cluster bool) *settler {
	return &settler{client: client, cluster: cluster, places: make(chan struct{}, maxUnsettled)}
}

// enter takes a place for a call, waiting while maxUnsettled calls are
// unsettled; it reports false, having taken none, when ctx ends first.
func (s *settler) enter(ctx context.Context) bool {
	select {
	case s.places <- struct{}{}:
		return true
	default:
	}
	select {
	case s.places <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave gives back the place of a call that is settled.
func (s *settler) leave() { <-s.places }

// late returns the error of a call given up on whose ctx ended with err:
// its Done closes once a probe sent after it has returned. keys are the
// keys that routed its commands (on a cluster, the probe goes to their
// nodes). The call's place is given back then.
func (s *settler) late(err error, keys ...string) error {
	s.mu.Lock()
	p := s.next
	if p == nil {
		p = &probe{done: make(chan struct{})}
		s.next = p
	}
	p.calls++
	if s.cluster {
		if p.slots == nil {
			p.slots = map[int]string{}
		}
		for _, k := range keys {
			p.slots[keyslot.Of(k)] = k
		}
	}
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	return &errs.Late{Err: err, Done: p.done}
}

// run sends the probes while calls are given up on.
func (s *settler) run() {
	for {
		s.mu.Lock()
		p := s.next
		s.next = nil
		if p == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		// Sent after every call p settles had given up: each of those
		// commands was in its connection's ring before its call returned.
		s.ping(p)
		close(p.done)
		for range p.calls {
			s.leave()
		}
	}
}

// ping sends a PING where p's calls went, and returns once every PING
// has returned: a reply, or an error (the connection failed, the client
// closed). It is not bounded by a ctx: it ends when the calls it settles
// do.
func (s *settler) ping(p *probe) {
	ping := driver.Command{Args: []any{"PING"}}
	if !s.cluster {
		cmd, _ := build(s.client.B(), ping, false, "", false)
		s.client.Do(context.Background(), cmd)
		return
	}
	cmds := make([]rueidis.Completed, 0, len(p.slots))
	for _, k := range p.slots {
		cmd, _ := build(s.client.B(), ping, true, k, true)
		cmds = append(cmds, cmd)
	}
	if len(cmds) > 0 {
		s.client.DoMulti(context.Background(), cmds...)
	}
}

// closedChan is the Done of a call that sent nothing.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// unsent is the error of a call whose ctx ended before it was sent.
func unsent(err error) error { return &errs.Late{Err: err, Done: closedChan} }

// redial says whether rueidis may be dialing the driver's connection
// anew (see the top of this file): from a call's failure that was not the
// server's answer (a broken or refused connection, rueidis's timeout)
// until a call run apart has had its reply, sent after it.
type redial struct {
	trouble atomic.Int64 // failures seen
	healed  atomic.Int64 // the failures seen before a call that then had its reply
}

// unsure reports whether rueidis may be dialing: calls run apart.
func (r *redial) unsure() bool { return r.trouble.Load() > r.healed.Load() }

// saw takes note of a call's error: one that is neither the server's
// answer nor a ctx's end may mean that the connection is being redialed.
func (r *redial) saw(err error) {
	if err == nil || isReply(err) {
		return
	}
	if _, late := errors.AsType[*errs.Late](err); late {
		return
	}
	r.trouble.Add(1)
}

// heal takes note of a call that had its reply after the first from
// failures were seen.
func (r *redial) heal(from int64) {
	for {
		h := r.healed.Load()
		if from <= h || r.healed.CompareAndSwap(h, from) {
			return
		}
	}
}

// apart runs f with ctx's values but not its end on a goroutine of its
// own and returns its result; or, when ctx ends first, fail's of an
// *errs.Late whose Done closes when f has returned (f's commands are
// then settled: nothing cut them short). When f's result is clean (every
// reply came), the connection is up: r heals.
func apart[T any](ctx context.Context, r *redial, f func(context.Context) T, fail func(error) T, clean func(T) bool) T {
	if err := ctx.Err(); err != nil {
		return fail(unsent(err))
	}
	from := r.trouble.Load()
	x := &outcome[T]{done: make(chan struct{})}
	go func() {
		x.v = f(context.WithoutCancel(ctx))
		if clean(x.v) {
			r.heal(from)
		}
		close(x.done)
	}()
	select {
	case <-x.done:
		return x.v
	case <-ctx.Done():
	}
	select {
	case <-x.done:
		return x.v // it came as ctx ended
	default:
	}
	return fail(&errs.Late{Err: ctx.Err(), Done: x.done})
}

// outcome is the result v of a call run apart, set before done closes.
type outcome[T any] struct {
	v    T
	done chan struct{}
}

func failedOne(err error) driver.Reply { return driver.Reply{Err: err} }

// cleanOne and cleanAll report whether replies came: values or the
// server's errors.
func cleanOne(r driver.Reply) bool { return r.Err == nil || isReply(r.Err) }

func cleanAll(rs []driver.Reply) bool {
	for _, r := range rs {
		if !cleanOne(r) {
			return false
		}
	}
	return true
}
