package backend

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// ReplicaSync is the WAIT that follows a grant; replicas 0 means none.
type ReplicaSync struct {
	Replicas int
	Timeout  time.Duration
}

func (s ReplicaSync) Validate() error {
	if s == (ReplicaSync{}) {
		return nil
	}
	if s.Replicas < 1 {
		return errs.Invalid("replica sync: %d replicas; want at least 1", s.Replicas)
	}
	if s.Timeout < time.Millisecond {
		return errs.Invalid("replica sync: timeout %v is below 1ms", s.Timeout)
	}
	return nil
}

// Check checks a WAIT reply and marks the batch's successful commands
// as failed when too few replicas acknowledged.
func (s ReplicaSync) Check(wait driver.Reply, rs []driver.Reply) {
	acked, err := wait.Int64()
	if err == nil && acked >= int64(s.Replicas) {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged within %v", errs.ReplicaSync, acked, s.Replicas, s.Timeout)
	} else {
		err = fmt.Errorf("%w: WAIT: %w", errs.ReplicaSync, err)
	}
	for i := range rs {
		if rs[i].Err == nil {
			rs[i] = protocol.FailedReply(err)
		}
	}
}
