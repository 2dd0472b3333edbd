// Package wire is dlock's own connection to one Redis server, which the
// go-redis driver sends a plain client's commands on (internal/goredis)
// instead of through the client's pool: made from the client's options
// (its Dialer, so TLS and a failover client's sentinel lookup come with
// it; its credentials, database and timeouts), it does what the pool
// cannot do without a goroutine per call.
//
//   - Bounded by ctx on the caller's goroutine. A caller waits for its
//     reply or its ctx, whichever comes first; a reader goroutine per
//     connection reads the replies in order and hands each to its caller.
//     A caller whose ctx ends first gets an *errs.Late, whose Done closes
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
//   - Never sent twice. A call goes once; a connection that fails (a
//     write or a read error, no reply within ReadTimeout) fails every call
//     on it (their outcome is unknown) and the next call dials anew. So
//     the driver's Info.ResendAfter is 0.
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
	lanes   [2]lane     // the shared connections: calls, and bulk (see bulkMin)
	free    []*conn     // idle dedicated connections
	closing atomic.Bool // Close was called: connections close once idle
	calls   sync.Pool   // of *call, for Do
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

// linger is how long a connection's reader goroutine waits, idle, for
// the next call before it ends (the next call starts another).
const linger = 100 * time.Millisecond

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
	if err := m.send(ctx, callsLane, k, cmd); err != nil {
		return driver.Reply{Err: err}
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
	if err := m.send(ctx, l, k, cmds...); err != nil {
		for i := range out {
			out[i] = driver.Reply{Err: err}
		}
	}
	return out
}

// send writes cmds on the shared connection as the call k and waits for
// its replies (see conn.roundTrip). A connection found dead before
// anything was written is dialled anew; a call that failed with its
// connection is sent again as MaxRetries says.
func (m *Mux) send(ctx context.Context, l int, k *call, cmds ...driver.Command) error {
	retries, pause := 0, retryFirst
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err := m.shared(ctx, l)
		if err == nil {
			err = c.roundTrip(ctx, k, cmds)
			if errors.Is(err, errUnsent) {
				continue
			}
			if err == nil {
				if k.failed == nil || !retriable(k.failed) || retries >= m.cfg.MaxRetries {
					return nil // the replies are in (or carry the error)
				}
				err = k.failed
				k.failed, k.delivered = nil, false
			}
		}
		if err != nil && (!retriable(err) || retries >= m.cfg.MaxRetries) {
			return err
		}
		retries++
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
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
			if c.usable() {
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
			if c.usable() {
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
	idle := c.err == nil && c.head == len(c.queue) && !c.flushing
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
		for i := range out {
			out[i] = driver.Reply{Err: err}
		}
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
// connection no more); else it wakes c's reader, which closes c once
// idle.
func (c *conn) closeIdle() {
	c.mu.Lock()
	idle := c.err == nil && c.head == len(c.queue) && !c.flushing
	if idle {
		c.err = ErrClosed
	}
	if c.idle {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	if idle {
		c.m.drop(c)
		_ = c.nc.Close()
	}
}

// dial opens a connection and sends it the hello commands, within ctx
// and DialTimeout.
func (m *Mux) dial(ctx context.Context) (*conn, error) {
	if m.cfg.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.DialTimeout)
		defer cancel()
	}
	nc, err := m.cfg.Dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.hello(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, err
	}
	c := &conn{m: m, nc: nc, wake: make(chan struct{}, 1)}
	c.r = bufio.NewReaderSize(deadlineReader{c}, 16<<10)
	c.used.Store(time.Now().UnixNano())
	return c, nil
}

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
	r    *bufio.Reader // read by the reader goroutine only
	wake chan struct{} // wakes the reader goroutine when it idles
	used atomic.Int64  // when a reply last came, or the connection was made (UnixNano)

	mu       sync.Mutex
	err      error   // why the connection failed; nil while it works
	out      []byte  // commands appended, not written yet
	spare    []byte  // the buffer last written, for the next appends
	flushing bool    // a caller is writing out
	queue    []*call // calls whose replies are awaited: queue[head:]
	head     int
	reading  bool // the reader goroutine runs
	idle     bool // it waits for a call (wake it)
}

// call is one round trip: a command (its reply in one) or a pipeline
// (many). Its fields past replies are the conn's, under its mu.
type call struct {
	one  driver.Reply
	many []driver.Reply
	n    int
	done chan struct{} // receives once the replies are in (buffered: the reader never waits)

	delivered bool          // the replies came, or the connection failed
	failed    error         // the connection failed before the replies came (each reply has it)
	late      chan struct{} // the caller gave up: closed when delivered
}

// newCall returns a call for len(many) replies.
func newCall(many []driver.Reply) *call {
	return &call{many: many, n: len(many), done: make(chan struct{}, 1)}
}

// oneCall returns a call for one reply, from m's pool. (A pool of its
// own: a call's channel made inside a testing/synctest bubble must not
// be used outside it, and a Mux made in a bubble stays there.)
func (m *Mux) oneCall() *call {
	if k, ok := m.calls.Get().(*call); ok {
		return k
	}
	return &call{n: 1, done: make(chan struct{}, 1)}
}

// reuse returns k to m's pool: only a call whose caller waited for it.
func (m *Mux) reuse(k *call) {
	k.one, k.delivered, k.failed = driver.Reply{}, false, nil
	m.calls.Put(k)
}

// usable reports whether a call may be written on c: it has not failed
// and, when it has been idle a while, the server has not closed it.
func (c *conn) usable() bool {
	c.mu.Lock()
	if c.err != nil { // failed, or retired: its reader closes it
		c.mu.Unlock()
		return false
	}
	ok := true
	if c.head == len(c.queue) && !c.flushing && time.Now().UnixNano()-c.used.Load() > int64(idleCheck) {
		ok = alive(c.nc)
	}
	c.mu.Unlock()
	if !ok {
		c.fail(errIdleClosed)
	}
	return ok
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

// roundTrip writes cmds as the call k and waits for their replies or
// ctx. It returns errUnsent when c had failed first (nothing written),
// an *errs.Late when ctx ended first (k is then left to the reader), and
// nil when the replies are in k. A connection that fails meanwhile puts
// its error in every reply of k.
func (c *conn) roundTrip(ctx context.Context, k *call, cmds []driver.Command) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return errUnsent
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
	switch {
	case !c.reading:
		c.reading = true
		go c.read()
	case c.idle:
		c.idle = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	write := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if write {
		c.flush()
	}
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	if k.delivered { // it came as ctx ended: take it
		c.mu.Unlock()
		<-k.done
		return nil
	}
	k.late = make(chan struct{})
	late := k.late
	c.mu.Unlock()
	return &errs.Late{Err: ctx.Err(), Done: late}
}

// flush writes out what callers appended until nothing is left, then
// lets the next caller write.
func (c *conn) flush() {
	c.mu.Lock()
	for len(c.out) > 0 && c.err == nil {
		buf := c.out
		c.out = c.spare[:0]
		c.mu.Unlock()
		if c.m.cfg.WriteTimeout > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.m.cfg.WriteTimeout))
		}
		_, err := c.nc.Write(buf)
		if err != nil {
			c.fail(err)
		}
		c.mu.Lock()
		c.spare = nil // never c.out's: that is being appended to
		if cap(buf) <= 64<<10 {
			c.spare = buf[:0]
		}
	}
	c.out = c.out[:0]
	c.flushing = false
	c.mu.Unlock()
}

// read is the reader goroutine: it reads the replies of the calls in
// order and hands each call its own; it ends when the connection fails,
// or when no call has come for linger.
func (c *conn) read() {
	t := time.NewTimer(linger)
	defer t.Stop()
	var got []driver.Reply
	for {
		c.mu.Lock()
		for c.head == len(c.queue) {
			if c.err == nil && !c.flushing && c.m.closing.Load() {
				c.err = ErrClosed // nothing in flight, and its Mux is closed
				c.mu.Unlock()
				c.m.drop(c)
				_ = c.nc.Close()
				c.mu.Lock()
			}
			if c.err != nil {
				c.reading = false
				c.mu.Unlock()
				_ = c.nc.Close() // failed, retired or closed: done with
				return
			}
			c.idle = true
			c.mu.Unlock()
			t.Reset(linger)
			timedOut := false
			select {
			case <-c.wake:
			case <-t.C:
				timedOut = true
			}
			c.mu.Lock()
			c.idle = false
			if timedOut && c.head == len(c.queue) && !c.m.closing.Load() {
				c.reading = false // nothing to read for linger: the next call starts another reader
				c.mu.Unlock()
				return
			}
		}
		k := c.queue[c.head]
		c.mu.Unlock()
		got = got[:0]
		for range k.n {
			r, err := readReply(c.r)
			if err != nil {
				c.fail(err)
				c.mu.Lock()
				c.reading = false
				c.mu.Unlock()
				return
			}
			got = append(got, r)
		}
		c.used.Store(time.Now().UnixNano())
		c.mu.Lock()
		if c.err == nil && readOnly(got) {
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
		}
		c.deliver(k, got, nil)
		c.mu.Unlock()
		clear(got)
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
		for i := range k.many {
			k.many[i] = driver.Reply{Err: err}
		}
	case k.many == nil:
		k.one = got[0]
	default:
		copy(k.many, got)
	}
	k.done <- struct{}{}
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
	for _, k := range pending {
		c.deliver(k, nil, err)
	}
	if c.idle {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	_ = c.nc.Close()
}

// deadlineReader reads the socket with ReadTimeout as the deadline of
// each read: the reader goroutine reads only while a reply is awaited.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	if t := d.c.m.cfg.ReadTimeout; t > 0 {
		_ = d.c.nc.SetReadDeadline(time.Now().Add(t))
	}
	return d.c.nc.Read(p)
}
