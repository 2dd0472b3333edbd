package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	cc, ok := raw(c.rdb).(*redis.ClusterClient)
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
