// dedicated.go: the connections Dedicated lends (WAIT after a write,
// WATCH and MULTI), and the idle ones kept for the next.

package wire

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

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
