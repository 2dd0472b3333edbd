// conn.go: one connection (conn) and one round trip on it (call, and
// the Mux's pool of calls for Do); whether a connection may take a call
// (usable, readOnly), its close once idle, and its failure (fail).

package wire

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// errUnsent: the connection had failed before the call was written.
var errUnsent = errors.New("dlock: connection failed before the call was sent")

// conn is one connection: its write buffer, and the calls written on it
// whose replies are awaited, oldest first.
type conn struct {
	m    *Mux // its Mux: the config, whether it closes, the lanes
	nc   net.Conn
	r    *bufio.Reader // read by the reader only (see reading)
	used atomic.Int64  // when a reply last came, or the connection was made (UnixNano)

	// the reader's, while it reads (see reading)
	got   []driver.Reply // the replies of queue[head] read so far
	until time.Time      // a reading caller's ctx deadline: no read waits past it
	dirty bool           // a deadline may be set on the socket: the next read sets its own
	poll  time.Time      // when a reading caller first looks at its ctx (see readAs)
	cbl   bool           // a cancel of the reading caller's ctx may set a deadline (see stop)

	mu       ctxMutex // see ctxMutex
	err      error    // why the connection failed; nil while it works
	out      []byte   // commands appended, not written yet: the last segment
	outs     [][]byte // the segments before out, in order, each segMax or more
	spare    []byte   // the buffer last written, for the next appends
	flushing bool     // a caller (or a goroutine it handed the rest to) is writing out
	wturn    uint64   // counts writes: a late cancel of a writer's ctx touches its own write only
	queue    []*call  // calls whose replies are awaited: queue[head:]
	head     int
	reading  bool   // a reader reads the replies: a caller (readAs) or a goroutine (read)
	turn     uint64 // counts the turns of reading callers: a late cancel touches its own only
	stop     bool   // the reading caller's ctx ended: its reads end at once
	retire   bool   // given back by Dedicated with a call in flight: closes once idle (giveBack)
}

// call is one round trip: a command (its reply in one) or a pipeline
// (many). Its fields past replies are the conn's, under its mu.
type call struct {
	one  driver.Reply
	many []driver.Reply
	n    int
	// done receives once the replies are in (false), or once it is the
	// caller's turn to read them (true); buffered: the sender never waits.
	done chan bool

	delivered bool          // the replies came, or the connection failed
	failed    error         // the connection failed before the replies came (each reply has it)
	late      chan struct{} // the caller gave up: closed when delivered
	turn      bool          // the caller reads, or done holds its turn to: deliver sends nothing
}

// markSentTwice marks k's replies as those of a call sent twice; once
// its caller has them.
func (k *call) markSentTwice() {
	if k.many == nil {
		k.one.SentTwice = true
	}
	for i := range k.many {
		k.many[i].SentTwice = true
	}
}

// newCall returns a call for len(many) replies.
func newCall(many []driver.Reply) *call {
	return &call{many: many, n: len(many), done: make(chan bool, 1)}
}

// oneCall returns a call for one reply, from m's pool. (A pool of its
// own: a call's channel made inside a testing/synctest bubble must not
// be used outside it, and a Mux made in a bubble stays there.)
func (m *Mux) oneCall() *call {
	if k, ok := m.calls.Get().(*call); ok {
		return k
	}
	return &call{n: 1, done: make(chan bool, 1)}
}

// reuse returns k to m's pool: only a call whose caller waited for it.
func (m *Mux) reuse(k *call) {
	k.one, k.delivered, k.failed = driver.Reply{}, false, nil
	m.calls.Put(k)
}

// usable reports whether a call may be written on c: it has not failed
// and, when it has been idle a while, the server has not closed it; or
// ctx's error when ctx ends before c's lock is taken.
func (c *conn) usable(ctx context.Context) (bool, error) {
	if !c.mu.lockCtx(ctx) {
		return false, ctx.Err()
	}
	if c.err != nil { // failed, or retired: its reader closes it
		c.mu.Unlock()
		return false, nil
	}
	ok := true
	if c.quiet() && time.Now().UnixNano()-c.used.Load() > int64(idleCheck) {
		ok = alive(c.nc)
	}
	c.mu.Unlock()
	if !ok {
		c.fail(errIdleClosed)
	}
	return ok, nil
}

var errIdleClosed = errors.New("dlock: connection closed by the server while idle")

// errReadOnly retires a connection whose server answered READONLY.
var errReadOnly = errors.New("dlock: connection to a replica (READONLY)")

// readOnly reports whether a reply is the READONLY error of a replica.
func readOnly(replies []driver.Reply) bool {
	for _, r := range replies {
		if e, ok := r.Err.(*driver.ErrorReply); ok && strings.HasPrefix(e.Error(), "READONLY") {
			return true
		}
	}
	return false
}

// closeIdle closes c if nothing is in flight on it (c is then its Mux's shared
// connection no more); else its reader closes c once idle (endReading),
// or its writer (flush).
func (c *conn) closeIdle() {
	c.mu.Lock()
	closed := c.closeIfIdle()
	c.mu.Unlock()
	if closed {
		c.m.drop(c)
		_ = c.nc.Close()
	}
}

// quiet reports, with c.mu held, that nothing is in flight on c, being
// written or being read.
func (c *conn) quiet() bool { return c.head == len(c.queue) && !c.flushing && !c.reading }

// closeIfIdle marks c closed, with c.mu held, when its Mux is closing
// (or c was retired: giveBack) and nothing is in flight or being read or
// written on it; the caller then drops and closes it.
func (c *conn) closeIfIdle() bool {
	if c.err == nil && c.quiet() && (c.m.closing.Load() || c.retire) {
		c.err = ErrClosed
		return true
	}
	return false
}

// fail ends c with err: it closes the socket and fails every call
// awaiting a reply (their outcome is unknown: each may have run).
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	pending := c.queue[c.head:]
	c.queue, c.head = nil, 0
	if len(pending) > 0 {
		busyConns.Add(-1)
	}
	for _, k := range pending {
		c.deliver(k, nil, err)
	}
	clear(c.got)
	c.got = c.got[:0]
	c.mu.Unlock()
	_ = c.nc.Close()
}
