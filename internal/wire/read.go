// read.go: the replies read: one at a time (next), handed to their
// calls in order (add, deliver), by the reader goroutine (read); and the
// socket's read deadline (deadlineReader).

package wire

import (
	"errors"
	"net"
	"time"

	"github.com/dlock-go/dlock/driver"
)

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
