// turn.go: who reads a connection's replies, in turn ("Who reads"):
// a call's round trip (roundTrip), the caller that reads as its own
// reply's reader (readAs) and hands the turn on (endReading), a caller
// that gives up (leave, giveUp), the reader goroutine started
// (goRead), and the connection's lock a ctx can stop waiting for
// (ctxMutex).

package wire

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

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

// goRead starts a reader goroutine, with c.mu held.
func (c *conn) goRead() {
	c.m.readers.Add(1)
	go c.read()
}
