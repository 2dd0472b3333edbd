package rueidisdlock

import (
	"context"
	"sync"
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
