package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// ErrClientClosed is what a call on Own's connections (to a server, or to
// a cluster's masters: clusterWire.goneNow) fails with once the go-redis client they were made from is closed: it
// wraps go-redis's redis.ErrClosed, which the same call through the
// client's pool returns, so that errors.Is(err, redis.ErrClosed) holds
// on either path.
var ErrClientClosed = fmt.Errorf("dlock: the go-redis client is closed: %w", redis.ErrClosed)

// ownConns is Own's connections to a single server, tied to the go-redis
// client they were made from (issue 45): closing that client ends the
// Driver's use of it, as it ended the pool's. A call the client's pool
// would refuse is refused, and the connections are closed; the holds
// whose renewals then fail are told when their validity runs out (within
// a TTL), as through the pool.
//
// Knowing costs an uncontended call (Do) one atomic load: the client's
// pool is asked whether it is closed (closedPool, no I/O) only where a
// pipeline or a dedicated connection is asked for — the watchdog's
// renewals each tick — and before a connection is dialled. So a Client
// holding something finds out at its next renewal; a Client idle since
// its last dial, at its first call after that renewal or dial (its first
// call after the close may still go out, and what it takes is then held
// until its first renewal: a TTL/3).
type ownConns struct {
	*wire.Mux
	rdb    *redis.Client
	closed atomic.Bool // rdb was found closed; the Mux is closed
}

// newOwnConns returns the connections of Own to the server of rdb, whose
// options are o: the Mux of ownMux, whose dials are refused once rdb is
// closed.
func newOwnConns(rdb *redis.Client, o *redis.Options) *ownConns {
	oc := &ownConns{rdb: rdb}
	cfg := ownConfig(o, o.Addr)
	dial := cfg.Dial
	cfg.Dial = func(ctx context.Context) (net.Conn, error) {
		if oc.gone() {
			return nil, ErrClientClosed
		}
		return dial(ctx)
	}
	oc.Mux = wire.New(cfg)
	return oc
}

// gone reports whether rdb has been closed, asking its pool when not yet
// known; found closed, it closes the Mux.
func (oc *ownConns) gone() bool {
	if oc.closed.Load() {
		return true
	}
	if !closedPool(oc.rdb) {
		return false
	}
	if oc.closed.CompareAndSwap(false, true) {
		_ = oc.Mux.Close()
	}
	return true
}

// ended is a context that has ended: what closedPool asks with.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// closedPool reports whether rdb's pool is closed (rdb.Close), without
// I/O: a command on an ended ctx stops at the pool's door, which answers
// redis.ErrClosed when closed and the ctx's error otherwise (go-redis
// v9's ConnPool.Get checks in that order). go-redis says no other way:
// its pool is not exported. The cost: a ProcessHook of the user's (a
// tracer) sees this PING, failed with context.Canceled, at each
// pipeline (each watchdog tick).
func closedPool(rdb *redis.Client) bool {
	return errors.Is(rdb.Process(ended, redis.NewCmd(ended, "PING")), redis.ErrClosed)
}

// Do sends c, unless rdb was found closed.
func (oc *ownConns) Do(ctx context.Context, c driver.Command) driver.Reply {
	if oc.closed.Load() {
		return driver.Reply{Err: ErrClientClosed}
	}
	return oc.Mux.Do(ctx, c)
}

// Pipeline sends cmds, unless rdb is closed.
func (oc *ownConns) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if oc.gone() {
		out := make([]driver.Reply, len(cmds))
		failAll(out, ErrClientClosed)
		return out
	}
	return oc.Mux.Pipeline(ctx, cmds)
}

// Dedicated runs fn on a connection of its own, unless rdb is closed.
func (oc *ownConns) Dedicated(ctx context.Context, fn func(driver.Conn) error) error {
	if oc.gone() {
		return ErrClientClosed
	}
	return oc.Mux.Dedicated(ctx, fn)
}

// failAll puts err in every reply of out.
func failAll(out []driver.Reply, err error) {
	for i := range out {
		out[i] = driver.Reply{Err: err}
	}
}
