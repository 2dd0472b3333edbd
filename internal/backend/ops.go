package backend

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// HoldOps is what a kind of hold does in Redis, as script calls whose
// replies follow one convention, so that Lease and the watchdog serve
// every primitive:
//
//	release  1 done, -1 not held (left = 0 frees every hold of the token),
//	         -4 stale (left > 0)
//	renew    1 renewed, 0 not held, -4 stale
//	ttl      milliseconds left, -3 not held
//
// renew with exact set makes the hold's TTL exactly ttl (Extend); without,
// at least ttl (the watchdog): a renewal still in flight when Extend
// lengthened a lease must not shorten it again on the server. seq is the
// command's place in its hold's sequence (internal/hold/doc.go, "Late commands"); a
// final release (left = 0) needs none.
type HoldOps interface {
	Release(token string, left int, seq int64) Op
	Renew(token string, ttl time.Duration, exact bool, seq int64) Op
	TTL(token string) Op
	// Free is the hold's final release (release with left 0), told the
	// hold's fence and TTL where the deployment answers a copy of it sent
	// again as done (unlock.lua); elsewhere release(token, 0, 0).
	Free(token string, fence int64, ttl time.Duration) Op
	// Ordered reports whether the server keeps the hold's sequence
	// (every protocol with scripts; not plain.go's).
	Ordered() bool
}

// Reentrant is the protocol of a hold that can be re-entered (Mutex,
// FairMutex, RWMutex; not a Semaphore's permits):
//
//	reenter  {1, ...} held with the new count, {-1} not held, {-4} stale
type Reentrant interface {
	Reenter(token string, count int, ttl time.Duration, seq int64) Op
}

// Op is one operation on Redis with an integer or array reply: a script
// call, or, without scripts, a transaction (see plain.go).
type Op interface {
	Run(ctx context.Context, r driver.Driver) driver.Reply
}

// RetryAfter turns a holder's remaining lease (PTTL) into the longest
// wait before the next attempt. A key without expiry (never set by dlock)
// is retried after a TTL, in case no release is ever published for it.
func RetryAfter(pttl int64, ttl time.Duration) time.Duration {
	if pttl < 0 {
		return ttl
	}
	return time.Duration(pttl) * time.Millisecond
}

// FenceReply reads a {1, fence} / {0, pttl} / {-1} reply into buf
// (appended to buf[:0]; nil: a slice of its own).
func FenceReply(op, name string, r driver.Reply, buf []int64) ([]int64, error) {
	if buf != nil {
		buf = buf[:0]
	}
	res, err := r.AppendInt64s(buf)
	if err != nil {
		return nil, errs.Redis(op, name, err)
	}
	if len(res) < 1 || (res[0] >= 0 && len(res) < 2) {
		return nil, errs.Redis(op, name, errors.New("unexpected script reply"))
	}
	return res, nil
}
