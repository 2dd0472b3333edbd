package dlock

import (
	"errors"
	"fmt"
	"time"
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
func (s replicaSync) check(wait Reply, rs []Reply) {
	acked, err := wait.Int64()
	if err == nil && acked >= int64(s.replicas) {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrReplicaSync, acked, s.replicas, s.timeout)
	} else {
		err = fmt.Errorf("%w: WAIT: %w", ErrReplicaSync, err)
	}
	for i := range rs {
		if rs[i].Err == nil {
			rs[i] = failedReply(err)
		}
	}
}

// clusterHint refreshes a cluster client's slot map after a failed call:
// go-redis follows MOVED by itself, but after a master dies it keeps
// dialling the dead node until its periodic reload (a minute). At most
// one refresh a second; go-redis runs it in the background itself.
func (c *Client) clusterHint(err error) {
	if c.rdb == nil || !c.rdb.Info().Cluster || err == nil || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed) {
		return
	}
	now := time.Now().UnixNano()
	last := c.reloaded.Load()
	if now-last < int64(time.Second) || !c.reloaded.CompareAndSwap(last, now) {
		return
	}
	c.rdb.Refresh()
}
