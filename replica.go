package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithReplicaSync makes every grant wait until replicas replicas have
// acknowledged it, for up to timeout: after an acquire, a re-entry, an
// Extend and each renewal, the Client sends WAIT replicas timeout on the
// connection that carried the write. An acquire that fewer replicas
// acknowledge is released and fails with an error matching ErrReplicaSync;
// a renewal that fewer acknowledge confirms nothing (the lease is lost at
// its deadline if that goes on).
//
// It narrows the failover hole of asynchronous replication: a lock that a
// replica has acknowledged survives that replica's promotion. It does not
// close it: WAIT does not make Redis consistent (a replica that
// acknowledged may not be the one promoted, and data may still be lost on
// a failover), and every grant costs up to a replication round trip more.
//
// Default: off. replicas must be at least 1 and timeout at least 1 ms. On
// a cluster, the write and its WAIT go to the master of the lock's slot,
// and renewals are sent one lock at a time rather than in a pipeline.
func WithReplicaSync(replicas int, timeout time.Duration) Option {
	return func(c *clientConfig) { c.sync = replicaSync{replicas, timeout} }
}

// replicaSync is the WAIT that follows a grant; replicas 0 means none.
type replicaSync struct {
	replicas int
	timeout  time.Duration
}

func (s replicaSync) validate() error {
	if s == (replicaSync{}) {
		return nil
	}
	if s.replicas < 1 {
		return invalid("replica sync: %d replicas; want at least 1", s.replicas)
	}
	if s.timeout < minTTL {
		return invalid("replica sync: timeout %v is below 1ms", s.timeout)
	}
	return nil
}

// check checks a WAIT reply and marks the batch's successful commands
// as failed when too few replicas acknowledged.
func (s replicaSync) check(wait *redis.Cmd, cmds []*redis.Cmd) {
	acked, err := wait.Int64()
	if err == nil && acked >= int64(s.replicas) {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplicaSync, acked, s.replicas, s.timeout)
	} else {
		err = fmt.Errorf("%w: WAIT: %w", ErrReplicaSync, err)
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil {
			cmd.SetErr(err)
		}
	}
}

// clusterHint refreshes a cluster client's slot map after a failed call:
// go-redis follows MOVED by itself, but after a master dies it keeps
// dialling the dead node until its periodic reload (a minute). At most
// one refresh a second; go-redis runs it in the background itself.
func (c *Client) clusterHint(err error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok || err == nil || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed) {
		return
	}
	now := time.Now().UnixNano()
	last := c.reloaded.Load()
	if now-last < int64(time.Second) || !c.reloaded.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}
