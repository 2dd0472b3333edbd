// write.go: the commands written: the write buffer flushed by one
// writer at a time (flush), each write bounded by its caller's ctx and
// WriteTimeout (write).

package wire

import (
	"context"
	"net"
	"time"
)

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
