// mux.go: a Mux and its shared connections, one a lane (calls, bulk):
// Do and Pipeline, the re-send of a call whose connection was reset
// (send), the dial of a lane's connection (shared), and Close.

package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backoff"
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
// pipeline of bulkMin commands or keys or more (the watchdog's renewals,
// up to a thousand at a tick) on a lane of its own, so that no Lock waits behind
// it on the wire. (Ordering across the two is not needed: a hold's
// commands carry their place in its sequence, internal/hold "Late
// commands", as they did on go-redis's pool of connections.)
const (
	callsLane = 0
	bulkLane  = 1
	bulkMin   = 64
)

// bulk reports whether cmds go on the bulk lane: bulkMin commands or
// more, or as many keys (few scripts of many holds' keys each: the
// watchdog's renewals folded, internal/backend).
func bulk(cmds []driver.Command) bool {
	if len(cmds) >= bulkMin {
		return true
	}
	keys := 0
	for _, c := range cmds {
		keys += c.Keys
	}
	return keys >= bulkMin
}

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
	if bulk(cmds) {
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
	retries, pause := 0, backoff.New(retryFirst, retryMax)
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
		t := time.NewTimer(pause.Next())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return twice, ctx.Err()
		}
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
