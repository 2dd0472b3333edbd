package dlock

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
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
func (s replicaSync) check(wait driver.Reply, rs []driver.Reply) {
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
			rs[i] = protocol.FailedReply(err)
		}
	}
}
