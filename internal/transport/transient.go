package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Transient reports whether err is one a cluster answers while a slot
// moves or a master fails over (see "Topology changes" in internal/transport/topology.go): a
// redirection, a cluster that is down or loading, a write sent to a
// replica, a WAIT cut short because its master became a replica, a script
// that met a key already migrated away (it stops at that key: the
// attempt's outcome is unknown, as for any failed attempt), or a round
// trip to a node that has gone.
func Transient(err error) bool {
	if e, ok := errors.AsType[*driver.ErrorReply](err); ok {
		msg := strings.TrimPrefix(e.Error(), "ERR ") // rueidis leaves it out
		for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN",
			"UNBLOCKED", "Script attempted to access a non local key"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	// A read that timed out (a node paused by a failover, whose WAIT or
	// writes wait for its replica) may have run: the outcome is unknown,
	// as for any failed attempt.
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// A call that meets a transient error while a cluster changes is made
// again after a pause that doubles from MovingFirst to MovingMax (see
// "Topology changes" in internal/transport/topology.go).
const (
	MovingFirst = 25 * time.Millisecond
	MovingMax   = 500 * time.Millisecond
)
