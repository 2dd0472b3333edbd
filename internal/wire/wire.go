// Package wire is dlock's own connection to one Redis server, which the
// go-redis driver sends a single server's client's commands on
// (internal/goredis; a failover client stays on its pool, which alone
// hears the sentinels) instead of through the client's pool: made from
// the client's options (its Dialer, so TLS comes with it; its
// credentials, database and timeouts), it does what the pool cannot do
// without a goroutine per call.
//
//   - Bounded by ctx on the caller's goroutine. The replies come in
//     order, and one reader at a time reads them, handing each to its
//     caller: the caller that found nobody reading, which reads until its
//     own reply has come (so a lone call is written and read on its
//     caller's goroutine, as go-redis does, with no goroutine woken), and
//     then hands the reading to the next caller waiting (see conn.readAs);
//     unless other connections of the process await replies too, when a
//     reader goroutine reads it (see "Who reads").
//     A reading caller's ctx bounds its reads (a deadline on the socket);
//     when it ends, the caller hands the reading to a goroutine between
//     two replies (nothing half read: a caller parses a reply only once
//     all of it is in the buffer, scanReply) and returns. A caller whose
//     ctx ends first gets an *errs.Late, whose Done closes
//     when the reply has come (to nobody) or the connection has died: the
//     command may have run until then, and not after, so the acquire path
//     waits for it before it undoes what the command may have granted.
//   - Pipelined. All the calls of a Mux share one connection (and a
//     second one the large pipelines, the watchdog's renewals, share:
//     bulkMin), ordered: a
//     caller appends its command to the connection's buffer, and the
//     caller that finds no write in progress writes the buffer, then what
//     others appended meanwhile, until it is empty. Many goroutines' calls
//     go in one write; a lone call goes at once, with no timer.
//     A writing caller's ctx bounds its write too: when it ends with
//     bytes left (a stopped server, full socket buffers), a goroutine
//     writes the rest of the buffer, in order, and the caller returns
//     an *errs.Late (see conn.flush).
//   - Never sent twice unsaid. A connection that fails (a write or a
//     read error, no reply within ReadTimeout) fails every call on it
//     (their outcome is unknown) and the next call dials anew. A call
//     whose connection was closed or reset by the other end (EOF,
//     ECONNRESET, EPIPE: a proxy or load balancer restarting) is sent
//     again, as go-redis's pool sends it again (MaxRetries), though its
//     first copy may have run or may still run later; its replies then
//     say so (driver.Reply.SentTwice), and the acquire path treats it as
//     a copy (it buries its token). A call whose reply did not come in
//     time is never sent again. So the driver's Info.ResendAfter is 0.
//     (Why re-send and mark rather than report the outcome unknown: a
//     team moving from go-redis's pool expects a reset to be ridden out
//     as the pool rides it out, and the mark costs one call, at the
//     release, of only the leases whose acquire was sent twice.)
//
// Dedicated lends a connection of its own (WAIT after a write, WATCH and
// MULTI), from a few kept idle. Pub/sub stays with go-redis.
package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// Config is how a Mux reaches its server.
type Config struct {
	// Dial opens a connection to the server.
	Dial func(ctx context.Context) (net.Conn, error)
	// Hello returns the commands sent first on every new connection
	// (AUTH, SELECT, CLIENT SETNAME); an error reply to one fails the
	// dial.
	Hello func(ctx context.Context) ([]driver.Command, error)
	// DialTimeout bounds a dial and its hello (0: only the caller's ctx).
	DialTimeout time.Duration
	// ReadTimeout: a connection on which a reply has been awaited this
	// long is dropped, failing its calls (0: never).
	ReadTimeout time.Duration
	// WriteTimeout bounds a write (0: never).
	WriteTimeout time.Duration
	// MaxRetries: a call on the shared connection that failed because the
	// connection was closed or reset, or could not be dialled (refused),
	// is sent again, on a new connection, up to this many times while its
	// ctx lasts (go-redis's MaxRetries), after a pause that doubles from
	// 8 ms to 512 ms. A call whose reply did not come in time (a read
	// timeout) is never sent again: its first copy may still run later.
	MaxRetries int
}

// Mux is the connections of one server: one shared by every Do and
// Pipeline, and the idle ones Dedicated lends. It is safe for concurrent
// use.
type Mux struct {
	cfg Config

	mu      sync.Mutex
	lanes   [2]lane      // the shared connections: calls, and bulk (see bulkMin)
	free    []*conn      // idle dedicated connections
	closing atomic.Bool  // Close was called: connections close once idle
	calls   sync.Pool    // of *call, for Do
	readers atomic.Int64 // reader goroutines started (tests count them)
}

// lane is one shared connection of a Mux.
type lane struct {
	cur     *conn         // nil before the first call and after a failure
	dialing chan struct{} // non-nil while a dial runs; closed when it ends
}

// The lanes: single commands and small pipelines go on the calls lane; a
// pipeline of bulkMin commands or more (the watchdog's renewals, up to a
// thousand at a tick) on a lane of its own, so that no Lock waits behind
// it on the wire. (Ordering across the two is not needed: a hold's
// commands carry their place in its sequence, internal/hold "Late
// commands", as they did on go-redis's pool of connections.)
const (
	callsLane = 0
	bulkLane  = 1
	bulkMin   = 64
)

// maxFree is how many idle dedicated connections a Mux keeps.
const maxFree = 8

// idleCheck: a connection idle this long is checked before a call is
// written on it, so that a connection the server (or a proxy) closed
// meanwhile fails no call.
var idleCheck = time.Second // a var: a test sets it to 0

// ErrClosed is why a connection of a closed Mux was closed.
var ErrClosed = fmt.Errorf("dlock: connection closed: %w", net.ErrClosed)

// New returns a Mux that dials its first connection at the first call.
func New(cfg Config) *Mux { return &Mux{cfg: cfg} }

// Do sends cmd on the shared connection and returns its reply.
func (m *Mux) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	k := m.oneCall()
	if twice, err := m.send(ctx, callsLane, k, cmd); err != nil {
		return driver.Reply{Err: err, SentTwice: twice}
	}
	r := k.one
	m.reuse(k)
	return r
}

// Pipeline sends cmds together on the shared connection.
func (m *Mux) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	if len(cmds) == 0 {
		return out
	}
	k, l := newCall(out), callsLane
	if len(cmds) >= bulkMin {
		l = bulkLane
	}
	if twice, err := m.send(ctx, l, k, cmds...); err != nil {
		// Fresh replies: a call whose caller gave up while another held
		// the connection's lock is left to the reader by a goroutine
		// (giveUp), and until that goroutine has it, the reader may still
		// write the replies it came with (the race detector saw both writes
		// in TestCancelSweep, once in ./test.sh).
		out = make([]driver.Reply, len(cmds))
		failAll(out, err)
		if twice {
			for i := range out {
				out[i].SentTwice = true
			}
		}
	}
	return out
}

// failAll puts err in every reply of out.
func failAll(out []driver.Reply, err error) {
	for i := range out {
		out[i] = driver.Reply{Err: err}
	}
}

// send writes cmds on the shared connection as the call k and waits for
// its replies (see conn.roundTrip). A connection found dead before
// anything was written is dialled anew; a call that failed with its
// connection is sent again as MaxRetries says, and its replies then say
// so (SentTwice: see "Never sent twice unsaid").
func (m *Mux) send(ctx context.Context, l int, k *call, cmds ...driver.Command) (twice bool, err error) {
	retries, pause := 0, retryFirst
	defer func() {
		if twice && err == nil {
			k.markSentTwice()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return twice, err
		}
		c, err := m.shared(ctx, l)
		if err == nil {
			err = c.roundTrip(ctx, k, cmds)
			if errors.Is(err, errUnsent) {
				continue
			}
			if err == nil {
				if k.failed == nil || !retriable(k.failed) || retries >= m.cfg.MaxRetries {
					return twice, nil // the replies are in (or carry the error)
				}
				err = k.failed
				k.failed, k.delivered = nil, false
				// Its bytes may have reached the server, which may have run
				// it (the connection reset after), or may still run it: the
				// copy sent now is a second.
				twice = true
			}
		}
		if err != nil && (!retriable(err) || retries >= m.cfg.MaxRetries) {
			return twice, err
		}
		retries++
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return twice, ctx.Err()
		}
		pause = min(2*pause, retryMax)
	}
}

// The pause before a call is sent again doubles from retryFirst to
// retryMax (go-redis's backoff).
const (
	retryFirst = 8 * time.Millisecond
	retryMax   = 512 * time.Millisecond
)

// retriable reports whether a call that failed with err may be sent
// again: its connection was refused, closed or reset by the other end,
// or found closed while idle. Not a timeout: the call may still be on
// its way, and a copy sent now could run before it.
func retriable(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errIdleClosed)
}

// shared returns the shared connection of lane l, dialled if there is
// none.
func (m *Mux) shared(ctx context.Context, l int) (*conn, error) {
	ln := &m.lanes[l]
	for {
		m.mu.Lock()
		if c := ln.cur; c != nil {
			m.mu.Unlock()
			ok, err := c.usable(ctx)
			if err != nil {
				return nil, err
			}
			if ok {
				return c, nil
			}
			m.drop(c)
			continue
		}
		if ch := ln.dialing; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		ln.dialing = ch
		m.mu.Unlock()
		c, err := m.dial(ctx)
		m.mu.Lock()
		ln.dialing = nil
		if err == nil {
			ln.cur = c
		}
		m.mu.Unlock()
		close(ch)
		return c, err
	}
}

// drop forgets c as a shared connection.
func (m *Mux) drop(c *conn) {
	m.mu.Lock()
	for i := range m.lanes {
		if m.lanes[i].cur == c {
			m.lanes[i].cur = nil
		}
	}
	m.mu.Unlock()
}

// Dedicated runs fn on a connection nobody else uses meanwhile: an idle
// one, or a new one. The connection is kept for the next Dedicated when
// fn leaves nothing in flight on it.
func (m *Mux) Dedicated(ctx context.Context, fn func(driver.Conn) error) error {
	c, err := m.lend(ctx)
	if err != nil {
		return err
	}
	err = fn(dedicated{c})
	m.giveBack(c)
	return err
}

func (m *Mux) lend(ctx context.Context) (*conn, error) {
	for {
		m.mu.Lock()
		if n := len(m.free); n > 0 {
			c := m.free[n-1]
			m.free = m.free[:n-1]
			m.mu.Unlock()
			ok, err := c.usable(ctx)
			if err != nil {
				m.giveBack(c)
				return nil, err
			}
			if ok {
				return c, nil
			}
			continue
		}
		m.mu.Unlock()
		return m.dial(ctx)
	}
}

func (m *Mux) giveBack(c *conn) {
	c.mu.Lock()
	idle := c.err == nil && c.quiet()
	if c.err == nil && !idle {
		// fn gave up on a call (an *errs.Late) still in flight: c closes
		// once its reply has come (closeIfIdle), not now. Closed now, the
		// call would be settled (its Late's Done) while its bytes may
		// still reach the server and run: an undo that waits for Done
		// (a transaction WithoutScripts, which nothing buries) would run
		// first.
		c.retire = true
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	m.mu.Lock()
	if idle && !m.closing.Load() && len(m.free) < maxFree {
		m.free = append(m.free, c)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	c.fail(ErrClosed)
}

// dedicated is the driver.Conn that Dedicated lends.
type dedicated struct{ c *conn }

func (d dedicated) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	if len(cmds) == 0 {
		return out
	}
	err := ctx.Err()
	if err == nil {
		err = d.c.roundTrip(ctx, newCall(out), cmds)
	}
	if err != nil {
		failAll(out, err)
	}
	return out
}

// Close closes the connections once nothing is in flight on them: the
// idle ones now, the others when their last reply has come. A call made
// after Close still goes, on a connection that closes once idle (what a
// Client's background still sends as it closes: a waiter's place given
// up, a last release).
func (m *Mux) Close() error {
	m.closing.Store(true)
	m.mu.Lock()
	lanes, free := m.lanes, m.free
	m.free = nil
	m.mu.Unlock()
	for _, ln := range lanes {
		if ln.cur != nil {
			ln.cur.closeIdle()
		}
	}
	for _, c := range free {
		c.fail(ErrClosed)
	}
	return nil
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

// dial opens a connection and sends it the hello commands, within ctx
// and DialTimeout.
func (m *Mux) dial(ctx context.Context) (*conn, error) {
	if m.cfg.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.DialTimeout)
		defer cancel()
	}
	nc, err := dialWithin(ctx, m.cfg.Dial)
	if err != nil {
		return nil, err
	}
	if err := m.hello(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, err
	}
	c := &conn{m: m, nc: nc, mu: make(ctxMutex, 1)}
	c.r = bufio.NewReaderSize(deadlineReader{c}, 16<<10)
	c.used.Store(time.Now().UnixNano())
	return c, nil
}

// dialWithin is dial(ctx), returned at ctx's end even when dial does not
// watch ctx: go-redis's own dialer with TLS (tls.DialWithDialer) is
// bounded by its DialTimeout alone, handshake included. The dial goes on
// in a goroutine of its own until it ends; a connection it makes after
// its caller gave up is closed. (A goroutine per dial: dials are rare.)
func dialWithin(ctx context.Context, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	type dialed struct {
		nc  net.Conn
		err error
	}
	done := make(chan dialed, 1)
	var mu sync.Mutex
	gaveUp := false
	go func() {
		nc, err := dial(ctx)
		if err == nil && nc == nil { // a broken Dial: an error, not a nil conn used
			err = errNoConn
		}
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			if err == nil { // (a failed dial's nc may be a typed nil)
				_ = nc.Close()
			}
			return
		}
		done <- dialed{nc, err}
	}()
	select {
	case d := <-done:
		return d.nc, d.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case d := <-done: // it came as ctx ended: taken, never lost
			return d.nc, d.err
		default:
			gaveUp = true
			return nil, ctx.Err()
		}
	}
}

// errNoConn: the Dial returned neither a connection nor an error.
var errNoConn = errors.New("dlock: the dialer returned no connection and no error")

// hello sends the hello commands on nc and reads their replies, with
// ctx's deadline (and cancellation) on the socket.
func (m *Mux) hello(ctx context.Context, nc net.Conn) error {
	if m.cfg.Hello == nil {
		return nil
	}
	cmds, err := m.cfg.Hello(ctx)
	if err != nil || len(cmds) == 0 {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var b []byte
	for _, c := range cmds {
		if b, err = appendCommand(b, c); err != nil {
			return err
		}
	}
	if _, err := nc.Write(b); err != nil {
		return err
	}
	r := bufio.NewReader(nc)
	for i := range cmds {
		rep, err := readReply(r)
		if err == nil {
			err = rep.Err
		}
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("dlock: %v on a new connection: %w", cmds[i].Args[0], err)
		}
	}
	if r.Buffered() > 0 {
		return errProtocol
	}
	if !stop() {
		return ctx.Err()
	}
	return nc.SetDeadline(time.Time{})
}

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

// Who reads. A caller whose call is alone on its connection reads its
// reply itself (readAs): no goroutine hands it over, which at one call in
// flight saves a fifth to a third of the client's CPU per round trip.
// Where other connections of the process await replies too (a client per
// goroutine, many Clients, a cluster's masters), a reader goroutine reads
// it and hands it over instead: with a caller per connection reading
// itself, 16 or 64 Clients of one process left a third of a core idle
// on a 2-core VM (the callers and the server waiting in turn for each
// other's wake-ups) and did 0.73x and 0.82x redislock's Lock+Unlock a
// second; with the reader, 0.90x and 0.93x, the CPU per call about the
// same (bench/README, "who reads a reply"). busyConns counts the connections
// with calls awaiting replies, each changed under its connection's mu
// (0 or 1 from each connection): it only picks the reader, so a count
// read as another connection changes picks one or the other, both right.
var busyConns atomic.Int64

// roundTrip writes cmds as the call k and waits for their replies or
// ctx. It returns errUnsent when c had failed first (nothing written),
// an *errs.Late when ctx ended first (k is then left to the reader), and
// nil when the replies are in k. A connection that fails meanwhile puts
// its error in every reply of k.
//
// The caller reads the replies itself when nobody reads (reading), or
// when the reader before it hands it the turn (done receives true).
func (c *conn) roundTrip(ctx context.Context, k *call, cmds []driver.Command) error {
	if !c.mu.lockCtx(ctx) {
		return ctx.Err() // nothing appended: not sent
	}
	if c.err != nil {
		c.mu.Unlock()
		return errUnsent
	}
	if len(c.out) >= segMax { // a new segment: no caller copies a long queue to grow it (see outs)
		c.outs = append(c.outs, c.out)
		c.out = nil
	}
	n0 := len(c.out)
	for _, cmd := range cmds {
		var err error
		if c.out, err = appendCommand(c.out, cmd); err != nil {
			c.out = c.out[:n0]
			c.mu.Unlock()
			return err
		}
	}
	c.queue = append(c.queue, k)
	if len(c.queue)-c.head == 1 {
		busyConns.Add(1) // (see "Who reads")
	}
	read := !c.reading
	c.reading = true
	if read && busyConns.Load() > 1 {
		c.goRead()
		read = false
	}
	k.turn = read
	write := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if write {
		c.flush(ctx)
	}
	if read {
		return c.readAs(ctx, k)
	}
	select {
	case turn := <-k.done:
		if !turn {
			return nil
		}
		return c.readAs(ctx, k)
	case <-ctx.Done():
	}
	late := make(chan struct{})
	if !c.mu.TryLock() {
		// The lock is held, maybe with many waiting for it (a blocked
		// write's backlog of calls): a goroutine waits for it, and the
		// caller returns now.
		go c.giveUp(k, late)
		return &errs.Late{Err: ctx.Err(), Done: late}
	}
	if c.leave(k, late) { // it came as ctx ended: take it
		return nil
	}
	return &errs.Late{Err: ctx.Err(), Done: late}
}

// giveUp leaves k to the reader once c's lock is taken, as roundTrip
// does for a caller whose ctx has ended, and closes late when k's reply
// has come (or the connection failed): at once if it has already.
func (c *conn) giveUp(k *call, late chan struct{}) {
	c.mu.Lock()
	if c.leave(k, late) {
		close(late)
	}
}

// leave leaves k, whose caller's ctx has ended, to the reader, with c's
// lock held, and releases it. It reports whether k's reply had already
// come (k.done then received: nothing is late); else the reader closes
// late when it comes, or when the connection fails. A turn to read that
// came to k as its ctx ended goes to a goroutine.
func (c *conn) leave(k *call, late chan struct{}) (delivered bool) {
	if k.delivered {
		turn := k.turn
		k.turn = false
		if turn {
			c.endReading()
		}
		c.mu.Unlock()
		<-k.done
		return true
	}
	if k.turn {
		k.turn = false
		<-k.done
		c.goRead()
	}
	k.late = late
	c.mu.Unlock()
	return false
}

// ctxMutex is a connection's lock, used as a sync.Mutex, that a caller
// can also stop waiting for when its ctx ends (lockCtx). A blocked
// write's backlog of calls (names of 32 KiB, and the undos of the calls
// whose ctx ended) makes a convoy on the lock, each holder copying its
// command in: under -race on 2 busy cores, callers waited in it up to
// 0.6 s after their ctx had ended (issue 45; TestLockWaitBoundedByCtx).
// The callers take it with lockCtx (usable, roundTrip), and a caller
// whose ctx has ended with TryLock, else a goroutine does (giveUp).
type ctxMutex chan struct{}

func (m ctxMutex) Lock()   { m <- struct{}{} }
func (m ctxMutex) Unlock() { <-m }

// TryLock takes the lock if it is free.
func (m ctxMutex) TryLock() bool {
	select {
	case m <- struct{}{}:
		return true
	default:
		return false
	}
}

// lockCtx takes the lock, or returns false when ctx ends first.
func (m ctxMutex) lockCtx(ctx context.Context) bool {
	if m.TryLock() {
		return true
	}
	select {
	case m <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// readAs reads replies in order, as the caller of k, until k's have come
// (delivering the others' to their callers), then hands the reading on
// (see endReading); k.turn is set, so that nothing is sent on k.done. ctx bounds each read: when it ends, a goroutine reads
// on from where the caller stopped, between two replies, and readAs
// returns an *errs.Late for k. A reply larger than the buffer is left to
// a goroutine too, which k's caller then waits for.
func (c *conn) readAs(ctx context.Context, k *call) error {
	c.mu.Lock()
	c.turn++
	turn := c.turn
	c.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		c.until = d
	}
	// A cancel is seen at once through an AfterFunc, which costs a reply
	// that comes at once more than its read does (2–3 allocations, some
	// 600 ns): so the first read waits at most pollFirst, then ctx is
	// looked at, and only a reply that has not come by then registers
	// the AfterFunc.
	cancellable := ctx.Done() != nil
	if cancellable {
		c.poll = time.Now().Add(pollFirst)
	}
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		c.mu.Lock()
		if k.delivered {
			k.turn = false
			c.endTurn(cancellable)
			c.drainBuffered()
			c.endReading()
			c.mu.Unlock()
			return nil
		}
		h := c.queue[c.head]
		c.mu.Unlock()
		r, err := c.next(true)
		switch {
		case err == nil:
			c.mu.Lock()
			c.add(h, r)
			c.mu.Unlock()
			continue
		case errors.Is(err, errTooBig):
		case isTimeout(err) && (ctx.Err() != nil || !c.until.IsZero() && !time.Now().Before(c.until)):
		case isTimeout(err) && !c.poll.IsZero() && !time.Now().Before(c.poll):
			c.poll = time.Time{}
			c.cbl = true
			stop = context.AfterFunc(ctx, func() {
				c.mu.Lock()
				if c.turn == turn { // still this caller's turn: end its read now
					c.stop = true
					_ = c.nc.SetReadDeadline(past)
				}
				c.mu.Unlock()
			})
			continue
		default: // the connection failed (or no reply came within ReadTimeout)
			c.fail(err)
			c.mu.Lock()
			k.turn = false
			c.endTurn(cancellable)
			c.reading = false
			closed := c.closeIfIdle()
			c.mu.Unlock()
			if closed {
				c.m.drop(c)
			}
			return nil
		}
		// hand the reading to a goroutine
		c.mu.Lock()
		k.turn = false
		c.endTurn(cancellable)
		c.goRead()
		if k.delivered { // the connection failed meanwhile
			c.mu.Unlock()
			return nil
		}
		if ctx.Err() == nil { // too big: wait for it
			c.mu.Unlock()
			select {
			case <-k.done:
				return nil
			case <-ctx.Done():
			}
			c.mu.Lock()
			if k.delivered {
				c.mu.Unlock()
				<-k.done
				return nil
			}
		}
		k.late = make(chan struct{})
		late := k.late
		c.mu.Unlock()
		return &errs.Late{Err: ctx.Err(), Done: late}
	}
}

// endTurn ends a reading caller's turn, with c.mu held: its ctx no
// longer touches the socket, and, when it could have, the next reader
// sets its own deadline (a cancel may have set one in the past).
func (c *conn) endTurn(cancellable bool) {
	c.turn++
	c.until, c.poll, c.stop, c.cbl = time.Time{}, time.Time{}, false, false
	c.dirty = c.dirty || cancellable
}

// pollFirst is how long a reading caller's first wait for a reply lasts
// before it looks at its ctx (and from then on is told of a cancel at
// once): a cancel during it is seen up to this late. Long enough that a
// reply across a zone (1-2 ms) comes first; at 1 ms, 64 callers with a
// client each on a loaded 2-core VM (replies after some 4 ms) paid the
// timer and the AfterFunc on most calls.
const pollFirst = 5 * time.Millisecond

// past is a deadline that has passed.
var past = time.Unix(1, 0)

// isTimeout reports whether err is a read's deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errTooBig: a reply that does not fit in a connection's read buffer,
// which a goroutine reads.
var errTooBig = errors.New("dlock: a reply larger than the read buffer")

// next reads the next reply. A caller (whole) parses one only once all
// of it is in the buffer, so that an error leaves nothing half read:
// errTooBig when it cannot be, else the read's.
func (c *conn) next(whole bool) (driver.Reply, error) {
	if !whole {
		return readReply(c.r)
	}
	for {
		b, _ := c.r.Peek(c.r.Buffered())
		if _, ok := scanReply(b); ok {
			return readReply(c.r)
		}
		if len(b) == c.r.Size() {
			return driver.Reply{}, errTooBig
		}
		if _, err := c.r.Peek(len(b) + 1); err != nil {
			return driver.Reply{}, err
		}
	}
}

// add takes r, a reply of the call h at the head of the queue, and
// delivers h's replies once all have come; with c.mu held. A reader
// reads a reply without c.mu, so the connection may have failed
// meanwhile (fail: a writer that met a killed connection); then fail has
// given h its error and emptied the queue, and r, which came too late to
// count, is dropped.
func (c *conn) add(h *call, r driver.Reply) {
	if c.head == len(c.queue) || c.queue[c.head] != h {
		return
	}
	c.got = append(c.got, r)
	if len(c.got) < h.n {
		return
	}
	c.used.Store(time.Now().UnixNano())
	if c.err == nil && readOnly(c.got) {
		// The server is a replica now (a failover demoted it): no new
		// call goes on c, and c closes once its calls in flight have
		// their replies; the next call dials the master anew (a
		// failover client's Dialer asks the sentinels).
		c.err = errReadOnly
	}
	c.queue[c.head] = nil
	c.head++
	if c.head == len(c.queue) {
		c.queue, c.head = c.queue[:0], 0
		busyConns.Add(-1)
	}
	c.deliver(h, c.got, nil)
	clear(c.got)
	c.got = c.got[:0]
}

// drainBuffered delivers the replies already in the buffer, to the
// callers waiting for them, before a reading caller hands the reading
// on; with c.mu held.
func (c *conn) drainBuffered() {
	for c.head < len(c.queue) {
		b, _ := c.r.Peek(c.r.Buffered())
		if _, ok := scanReply(b); !ok {
			return
		}
		r, err := readReply(c.r)
		if err != nil {
			return // the next reader meets it again
		}
		c.add(c.queue[c.head], r)
	}
}

// endReading ends a reader's turn, with c.mu held: the caller of the
// call at the head of the queue reads next, or, when it gave up, a
// goroutine; nobody when nothing is awaited (and c closes if its Mux
// is closing).
func (c *conn) endReading() {
	switch {
	case c.err != nil || c.head == len(c.queue):
		c.reading = false
		if c.closeIfIdle() {
			go func() {
				c.m.drop(c)
				_ = c.nc.Close()
			}()
		}
	case c.queue[c.head].late != nil:
		c.goRead()
	default:
		h := c.queue[c.head]
		h.turn = true
		h.done <- true
	}
}

// flush writes out what callers appended until nothing is left, then
// lets the next caller write. ctx, the writing caller's, bounds each of
// its writes (a deadline on the socket, and a cancel seen at once): when
// it ends with bytes left — the server stopped, the socket buffers full
// — the rest of the buffer is handed to a goroutine that writes on
// (bounded by WriteTimeout alone, as a write on go-redis's pool is), so
// that no caller's bytes are lost or half sent, and the caller returns
// at once; its own call, whose bytes may be partly written, is then an
// *errs.Late like any call whose reply its caller gave up on (see
// roundTrip). A write that fails otherwise fails the connection.
func (c *conn) flush(ctx context.Context) {
	c.mu.Lock()
	for (len(c.out) > 0 || len(c.outs) > 0) && c.err == nil {
		var w writing
		var whole []byte // reused for the next appends once written
		if len(c.outs) == 0 {
			w.one, whole = c.out, c.out
		} else {
			w.bufs = net.Buffers(append(c.outs, c.out))
		}
		c.outs, c.out = nil, c.spare[:0]
		c.spare = nil // never c.out's: that is being appended to
		c.wturn++
		w.turn = c.wturn
		if t := c.m.cfg.WriteTimeout; t > 0 {
			w.dl = time.Now().Add(t)
		}
		if d, ok := ctx.Deadline(); ok && (w.dl.IsZero() || d.Before(w.dl)) {
			w.dl, w.byCtx = d, true
		}
		if ctx.Err() != nil {
			w.dl = past
		}
		c.mu.Unlock()
		w, err := c.write(ctx, w)
		c.mu.Lock()
		c.wturn++ // a cancel that comes now touches no later write
		if err != nil && isTimeout(err) && c.err == nil && (ctx.Err() != nil || w.byCtx && !time.Now().Before(w.dl)) {
			// The caller gave up: a goroutine writes the rest, then
			// what others appended meanwhile, in order. (A TLS
			// connection cannot write on after a timeout: its next
			// write fails, and so the connection, its calls' outcome
			// unknown.)
			rest := w.bufs
			if rest == nil {
				rest = net.Buffers{w.one}
			}
			c.outs = append(append([][]byte(nil), rest...), c.outs...)
			c.mu.Unlock()
			go c.flush(context.Background())
			return
		}
		if err != nil {
			c.mu.Unlock()
			c.fail(err)
			c.mu.Lock()
			continue
		}
		if whole != nil && cap(whole) <= 64<<10 {
			c.spare = whole[:0]
		}
	}
	c.out, c.outs = c.out[:0], nil
	c.flushing = false
	closed := c.closeIfIdle()
	c.mu.Unlock()
	if closed {
		c.m.drop(c)
		_ = c.nc.Close()
	}
}

// writing is one write of flush: the buffer (one) or the segments (bufs)
// left to write, and its deadline.
type writing struct {
	one   []byte
	bufs  net.Buffers
	turn  uint64    // c.wturn during the write
	dl    time.Time // WriteTimeout's, or ctx's when earlier (byCtx)
	byCtx bool
}

// write writes w out, within w.dl and ctx, and returns it with what was
// not written. As a reading caller's first read (readAs), the first wait
// lasts at most pollFirst before ctx is looked at, and only a write that
// has not gone by then registers an AfterFunc on ctx (which costs a
// write that goes at once some allocations).
func (c *conn) write(ctx context.Context, w writing) (writing, error) {
	dl := w.dl
	cancellable := ctx.Done() != nil
	if cancellable && dl != past {
		if p := time.Now().Add(pollFirst); dl.IsZero() || p.Before(dl) {
			dl = p
		}
	}
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	c.mu.Lock()
	_ = c.nc.SetWriteDeadline(dl)
	c.mu.Unlock()
	for {
		var err error
		if w.bufs == nil {
			var n int
			n, err = c.nc.Write(w.one)
			w.one = w.one[n:]
		} else {
			bufs := w.bufs
			_, err = bufs.WriteTo(c.nc) // (what was written is consumed from bufs)
			w.bufs = bufs
		}
		if err == nil || !isTimeout(err) || stop != nil || !cancellable || dl.Equal(w.dl) || ctx.Err() != nil {
			return w, err
		}
		// The poll passed, ctx still on: from now a cancel ends the write
		// at once, and the write waits until w.dl.
		turn := w.turn
		stop = context.AfterFunc(ctx, func() {
			c.mu.Lock()
			if c.wturn == turn { // still this write: end it now
				_ = c.nc.SetWriteDeadline(past)
			}
			c.mu.Unlock()
		})
		dl = w.dl
		c.mu.Lock()
		if ctx.Err() == nil { // (else the AfterFunc has set it, or will)
			_ = c.nc.SetWriteDeadline(dl)
		}
		c.mu.Unlock()
	}
}

// segMax: a caller appends its command to the last segment of the
// write buffer until it holds this many bytes, then starts a new one; so
// while a write is blocked (a server stopped), a queue of megabytes
// grows without any caller copying it under the connection's lock.
const segMax = 64 << 10

// goRead starts a reader goroutine, with c.mu held.
func (c *conn) goRead() {
	c.m.readers.Add(1)
	go c.read()
}

// read is a reader goroutine: it reads the replies of the calls in
// order from where the reader before it stopped, and hands each call its
// own, until none is awaited or the connection fails.
func (c *conn) read() {
	for {
		c.mu.Lock()
		if c.err != nil || c.head == len(c.queue) {
			c.reading = false
			closed := c.closeIfIdle()
			failed := c.err != nil
			c.mu.Unlock()
			if closed {
				c.m.drop(c)
			}
			if closed || failed {
				_ = c.nc.Close() // failed, retired or closed: done with
			}
			return
		}
		h := c.queue[c.head]
		c.mu.Unlock()
		r, err := c.next(false)
		if err != nil {
			c.fail(err)
			continue
		}
		c.mu.Lock()
		c.add(h, r)
		c.mu.Unlock()
	}
}

// deliver gives k its replies (or err as each), to its caller or, when
// the caller gave up, to nobody; with c.mu held.
func (c *conn) deliver(k *call, got []driver.Reply, err error) {
	k.delivered, k.failed = true, err
	if k.late != nil {
		close(k.late)
		return
	}
	switch {
	case err != nil && k.many == nil:
		k.one = driver.Reply{Err: err}
	case err != nil:
		failAll(k.many, err)
	case k.many == nil:
		k.one = got[0]
	default:
		copy(k.many, got)
	}
	if k.turn { // its caller reads, or done holds its turn to, which ends at once
		return
	}
	k.done <- false
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

// deadlineReader reads the socket with ReadTimeout as the deadline of
// each read, or a reading caller's ctx deadline when that comes first:
// a reader reads only while a reply is awaited.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	c := d.c
	var dl time.Time
	if t := c.m.cfg.ReadTimeout; t > 0 {
		dl = time.Now().Add(t)
	}
	if !c.until.IsZero() && (dl.IsZero() || c.until.Before(dl)) {
		dl = c.until
	}
	if !c.poll.IsZero() && (dl.IsZero() || c.poll.Before(dl)) {
		dl = c.poll
	}
	switch {
	case c.cbl:
		// under mu, so that a cancel's past deadline (readAs) is not
		// overwritten by a later one
		c.mu.Lock()
		if c.stop {
			dl = past
		}
		_ = c.nc.SetReadDeadline(dl)
		c.mu.Unlock()
		c.dirty = true
	case !dl.IsZero() || c.dirty:
		_ = c.nc.SetReadDeadline(dl)
		c.dirty = !dl.IsZero()
	}
	return c.nc.Read(p)
}
