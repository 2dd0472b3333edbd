// dial.go: a new connection: its dial, bounded by ctx whatever the
// dialer does (dialWithin), and its hello commands (AUTH, SELECT, ...).

package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

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
