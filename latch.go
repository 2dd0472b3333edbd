package dlock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Latch is a count-down latch: waiters block until the count, set once,
// has been counted down to zero. At zero the latch opens and every waiter
// (in every process) is woken; a latch that is never counted down
// expires after the TTL given to TrySetCount.
//
// Wait returns as soon as the latch is open: counted down to zero,
// expired, or never set. Set the count before anyone waits.
//
// A latch can be used again once open: TrySetCount begins a new phase.
// CountDown counts once per call, CountDownOnce once per id and phase: a
// worker that retries after an ambiguous failure, or runs twice, passes
// the same id and is counted once. Each call counts at most once, in the
// phase it belongs to, even when the network or the client library
// delivers it twice or late: a copy of a call that arrives after its
// phase ended counts in no other. The argument, and its one limit, are
// beside countDown in latch.go.
//
// A count-down belongs to a phase the handle has seen: it remembers the
// phase its last call saw, so that a count-down takes one round trip; a
// handle's first count-down (unless TrySetCount, Count or Wait came
// first), and one made after the latch began a phase the handle has not
// seen, take two. A handle is safe for concurrent use.
type Latch struct {
	c     *Client
	k     *protocol.Keys
	keys  []string               // count, calls, the last phase's calls
	phase atomic.Pointer[string] // the phase this handle last saw; nil: none yet
}

// Latch returns the handle of the count-down latch called name.
func (c *Client) Latch(name string) *Latch {
	k := c.keys(protocol.LatchKind, name)
	return &Latch{c: c, k: k, keys: protocol.LatchKeys(k)}
}

// latchKind is what Inspect, Locks and ForceUnlock know of a Latch: its
// count, and nothing else (no holders, no waiters); forcing it opens it.
var latchKind = kindSpec{primitive: "Latch", keys: protocol.LatchKind,
	reads: func(k *protocol.Keys) []driver.Command { return []driver.Command{protocol.Keyed("GET", k.Lock)} },
	fill: func(in *inspection) bool {
		in.info.Count, _ = strconv.ParseInt(in.text(0), 10, 64)
		in.info.Held = in.info.Count > 0
		return false
	},
	force: func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply {
		return protocol.LatchOpenArgs{Channel: k.Channel, Publish: c.publish, ID: rc.id, ReceiptTTL: rc.ttl}.Call(k).Run(ctx, r)
	}}

// Name returns the latch's name.
func (l *Latch) Name() string { return l.k.Name }

// TrySetCount sets the count to n (at least 1) if the latch has no count,
// with a time to live of ttl (at least 1 ms), and reports whether it did;
// this begins a new phase of the latch. A call the client library sends
// twice (a re-send after a lost reply) sets the count once and reports
// true. One round trip.
func (l *Latch) TrySetCount(ctx context.Context, n int64, ttl time.Duration) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if n < 1 {
		return false, invalid("latch %q: count %d; want at least 1", l.k.Name, n)
	}
	if ttl < minTTL {
		return false, invalid("latch %q: TTL %v is below 1ms", l.k.Name, ttl)
	}
	r, err := protocol.LatchSetArgs{Count: n, TTL: ttl.Milliseconds(), ID: randomHex(16)}.Call(l.keys).Run(ctx, l.c.rdb).Slice()
	if err != nil {
		return false, redisErr("set count", l.k.Name, err)
	}
	if len(r) != 2 {
		return false, redisErr("set count", l.k.Name, errReplyShape(r))
	}
	ok, _ := (driver.Reply{Val: r[0]}).Int64()
	phase, err := (driver.Reply{Val: r[1]}).Text()
	if err != nil {
		return false, redisErr("set count", l.k.Name, err)
	}
	l.phase.Store(&phase)
	return ok == 1, nil
}

// CountDown counts the latch down by one and returns the count left; at
// zero the waiters are woken. Counting down an open latch (or one that
// does not exist) does nothing and returns 0, as does a call during which
// the phase it found ended (the latch was open in between). A call sent
// twice by the client library counts once and returns the count its
// first copy left. One round trip, sometimes two (see Latch).
func (l *Latch) CountDown(ctx context.Context) (int64, error) {
	return l.countDown(ctx, "")
}

// CountDownOnce counts the latch down by one unless id has already
// counted down this phase of the latch, and returns the count left. id
// must not be empty.
func (l *Latch) CountDownOnce(ctx context.Context, id string) (int64, error) {
	if id == "" {
		return 0, invalid("latch %q: empty id", l.k.Name)
	}
	return l.countDown(ctx, id)
}

// The replies of latch_down.lua.
const (
	latchDone   = "done"   // answered: the count the call (or a copy of it) left
	latchMoved  = "moved"  // not counted; its phase is not the latch's
	latchUnsure = "unsure" // its phase is older than the last: it may have counted
)

// countDown counts the latch down once, as call id, in the phase the call
// belongs to (once is the CountDownOnce id, or "").
//
// Which copies may arrive late or twice, and why none counts twice or in
// the wrong phase. Every attempt this call makes carries the call's id and
// a phase; go-redis may send an attempt again after a lost reply, and a
// given-up attempt's bytes may reach the server at any later time. On the
// server (latch_down.lua) an attempt counts only if its phase is the
// latch's current phase, and only if no copy with the call's id counted
// in it: so every copy of one attempt counts at most once, and only in
// the phase it carries. Phases are named by a random id, new at each
// TrySetCount, and never come back.
//
// The phase an attempt carries is one this handle saw: the one remembered
// from an earlier call, or one learned during this call ('?' first when
// the handle has seen none: that attempt counts nothing). An attempt with
// a phase learned during this call is the last: if it finds the latch in
// another phase, its phase ended while the call ran, and the call returns
// 0 (the latch was open in between; if a copy of the attempt had counted,
// that phase has ended anyway). An attempt with a remembered phase may
// find the latch moved on; the server keeps the last phase's calls, so it
// says whether this call counted there ('done': it is answered) or not
// ('moved': then it is made again, with the same id, in the phase now
// current, and no copy of the first attempt can count anywhere). So a
// late copy of a call that was given up, whether or not the call was
// retried, counts in no phase that began after the copy was sent
// (finding 11 of issue 23).
//
// The one limit: when the remembered phase is older than the last one
// ('unsure'), the server no longer knows whether a copy of this attempt
// counted in it, and the call is made again in the current phase. It
// counts twice only if go-redis re-sent this attempt after its first copy
// counted, and in between its phase ended and two more phases began.
func (l *Latch) countDown(ctx context.Context, once string) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	id := randomHex(16)
	phase, remembered := "?", false
	if p := l.phase.Load(); p != nil {
		phase, remembered = *p, true
	}
	for {
		status, n, now, err := l.down(ctx, id, phase, once)
		if err != nil {
			return 0, err
		}
		l.phase.Store(&now)
		switch {
		case status == latchDone:
			return n, nil
		case n == 0: // open: nothing to count
			return 0, nil
		case phase == "?" || remembered:
			phase, remembered = now, false
		default: // the phase learned during this call ended during it
			return 0, nil
		}
	}
}

// errReplyShape is the error of a latch script's reply that is not what
// the script returns (another script under its name, say).
func errReplyShape(r []any) error { return fmt.Errorf("dlock: unexpected latch reply %v", r) }

// down runs one attempt of a count-down (see latch_down.lua).
func (l *Latch) down(ctx context.Context, id, phase, once string) (status string, n int64, now string, err error) {
	r, err := protocol.LatchDownArgs{ID: id, Phase: phase, Once: once, Channel: l.k.Channel, Publish: l.c.publish}.Call(l.keys).Run(ctx, l.c.rdb).Slice()
	if err == nil && len(r) != 3 {
		err = errReplyShape(r)
	}
	if err == nil {
		status, err = (driver.Reply{Val: r[0]}).Text()
	}
	if err == nil {
		n, err = (driver.Reply{Val: r[1]}).Int64()
	}
	if err == nil {
		now, err = (driver.Reply{Val: r[2]}).Text()
	}
	if err == nil && status != latchDone && status != latchMoved && status != latchUnsure {
		err = errReplyShape(r)
	}
	if err != nil {
		return "", 0, "", redisErr("count down", l.k.Name, err)
	}
	return status, n, now, nil
}

// Count returns the count left: 0 when the latch does not exist.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	n, _, err := l.count(ctx)
	return n, err
}

// Wait blocks until the latch is open (its count reached zero, or it does
// not exist) or ctx ends. It is woken by the count-down that opens it; if
// that notification is lost it notices when the latch would expire. When
// ctx ends first it returns an error matching ErrNotObtained and
// ctx.Err().
func (l *Latch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	n, left, err := l.count(ctx)
	if err != nil || n == 0 {
		return err
	}
	return l.c.acq.WaitLoop(ctx, l.k.Name, l.k.Channel, "", nil, left,
		func(ctx context.Context, _ string) (bool, time.Duration, error) {
			n, left, err := l.count(ctx)
			return n == 0, left, err
		})
}

// count returns the count and how long the latch has to live; the handle
// remembers the phase of a closed latch.
func (l *Latch) count(ctx context.Context) (int64, time.Duration, error) {
	rs := l.c.rdb.Pipeline(ctx, []driver.Command{protocol.Keyed("GET", l.k.Lock), protocol.Keyed("PTTL", l.k.Lock),
		protocol.Keyed("HGET", l.keys[1], "@p")})
	if err := backend.FirstErr(rs); err != nil {
		return 0, 0, redisErr("count", l.k.Name, err)
	}
	if rs[0].Val == nil {
		return 0, 0, nil
	}
	n, err := rs[0].Int64()
	if err != nil {
		return 0, 0, redisErr("count", l.k.Name, err)
	}
	phase, _ := rs[2].Text() // "" for a latch set by an older dlock
	l.phase.Store(&phase)
	ms, _ := rs[1].Int64()
	left := time.Duration(ms) * time.Millisecond
	if left <= 0 {
		// No expiry (not set by dlock): still wait for the notification,
		// checking again now and then.
		left = time.Second
	}
	return max(n, 0), left, nil
}

func (l *Latch) check(ctx context.Context) error {
	if l == nil {
		return invalid("nil Latch")
	}
	if err := checkCall(ctx, l.c, l.k.Name); err != nil {
		return err
	}
	if err := l.c.caps.Supports("Latch"); err != nil {
		return err
	}
	return nil
}
