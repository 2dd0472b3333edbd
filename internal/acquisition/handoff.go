package acquisition

import (
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"
)

// HandedOver reads msg, a hand-off to this waiter, whose latest place is
// p (see "Hand-off" above), as the outcome of an attempt: the lock taken
// with no request. ok is false when msg is not a hand-off, came before
// p's attempt ran (its fence is not above p.Seen), or leaves too little
// time to count on (less than a quarter of the lease after the drift
// margin d): the caller then makes an attempt.
func HandedOver(msg string, p backend.Place, d backend.Drift) (o backend.Outcome, ok bool) {
	m, ok := protocol.ParseHandOff(msg)
	if !ok || p.Sent.IsZero() || !p.Named || m.Fence <= p.Seen {
		return o, false
	}
	granted := time.Duration(m.MS) * time.Millisecond
	if time.Until(p.Sent.Add(granted-d.Of(granted))) < granted/4 {
		return o, false
	}
	// Its validity counts from p.Sent (above); its max hold from now, when
	// the hand-off has reached it: the release granted it before, for
	// granted, at most the max hold (a TTL is cut to it), so Redis's hold
	// ends before the max hold does, and renewals are cut to it (internal/hold/hold.go,
	// "Max hold").
	return backend.Outcome{Granted: true, Fence: m.Fence, Start: p.Sent, TTL: granted, Handed: true, MaxFrom: time.Now()}, true
}
