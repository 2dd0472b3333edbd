package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// hold is one owner's possession of a lock in Redis: a token with a hold
// count. Re-entry adds leases to the same hold; the hold ends when its last
// lease is unlocked, or for all of its leases at once when it is lost.
type hold struct {
	c        *Client
	k        *protocol.Keys
	p        backend.HoldOps
	what     string    // the primitive, for telemetry
	acquired time.Time // when the attempt that took it was sent
	// maxFrom is when its max hold (WithMaxHold) began: acquired, or, for
	// a hold handed over by a release, when the hand-off reached the
	// waiter (handedOver)
	maxFrom time.Time
	side    side // the side of an RWMutex hold; "" for other locks
	token   string
	fence   int64

	// calls serialises the calls that set the hold count in Redis (re-entry
	// and unlock), so that the count they send is the one they read.
	calls sync.Mutex

	mu        sync.Mutex
	count     int           // holds in Redis (under op for writes)
	ttl       time.Duration // lease length used by renewals
	deadline  time.Time     // local: the lease may be gone after this
	nextRenew time.Time     // when the watchdog renews it next
	maxHold   time.Duration // WithMaxHold: no command sets its lease past maxFrom+maxHold (maxEnd); 0: none
	renew     bool          // the watchdog renews it (set when made; beside the flags below, to pack them)
	limited   bool          // a confirmed lease reaches its max hold: when it runs out, the max hold did (set by confirmed only)
	renewing  bool          // a renewal of it is in flight
	releasing bool          // its final Unlock is in flight: a renewal that finds it gone is not a loss
	handed    bool          // set when made: a release handed it over (handedOver), no attempt of its own took it
	buryFor   time.Duration // set when made: its final release buries the token first, for this long (buryFirst)
	// Its places in the watchdog's schedules (guarded by the watchdog's mu).
	deadlineAt, renewAt slot
	epoch               int      // bumped by Extend: older renewals confirm nothing
	leases              []*Lease // unlocked ones are removed (few: one per re-entry)
	err                 error    // why the hold ended; nil while held
	seq                 int64    // the last place given in the hold's sequence (see next)
	unsure              []unsure // Extends given up on that may still set the lease (see mayHaveSet)
}

// Late commands. A command that the client gave up on is not a command
// the server will not run: go-redis gives up when the ctx ends or its
// ReadTimeout passes and closes the connection, but bytes already on
// their way may still reach the server, late (TCP holds them while a path
// stalls, then delivers them); and go-redis sends a call again when it
// lost the reply, so the server may run it twice. So every command that
// changes a hold after it was taken — a renewal, Extend, a re-entry, an
// inner unlock, Proclaim — carries its place in the hold's sequence
// (next: one more than the last, under h.mu), and the scripts keep, in
// the hold's own hash field 'q:<token>', the highest place that ran
// (in_order, scripts/lib_queue.lua). A command whose place is below it is
// refused (STALE) and changes nothing; a copy of the one that ran answers
// done and changes nothing. What that gives, for any order of arrival:
//
//   - No command can shorten a lease the holder counts on. The holder
//     counts on a confirmation: a command C with place c that ran, sent at
//     start, setting the lease to at least ttl from when it ran (every
//     renewal and re-entry only lengthens; Extend sets exactly d). After
//     C ran, a command with a place below c never runs; one with a place
//     above c was sent by this client after C was given its place, and
//     is an Extend (the only command that may shorten), whose d the hold
//     takes into account from its own start, whether it answered
//     (extend) or not (mayHaveSet, which caps every later confirmation by
//     d until a command with a higher place is confirmed: then the Extend
//     can no longer run), or a renewal sent while such an Extend was
//     unsure, which sets the lease to exactly its ttl (watchdog.due): its
//     start+ttl is no earlier than C's start+ttl (the same TTL from a
//     later start, or both cut to the same max hold; after an Extend
//     the hold counts on the Extend's own), so it shortens only what a
//     late Extend added, which the hold never counted on.
//   - No command removes another lease's hold: each hold has its own
//     token, and every command names its token (a read inside a write has
//     a token of its own; re-entered leases share a hold and its count,
//     which the commands set, not add to, in sequence order).
//   - No command overwrites a newer value (Proclaim): a later Proclaim
//     has a higher place.
//   - A final release needs no place: it ends the hold, and every later
//     arrival finds no token and changes nothing.
//
// A STALE reply only means a later command ran: an Extend, re-entry or
// Proclaim that meets one (a renewal sent meanwhile) is sent again with a
// new place (inOrder); a renewal that meets one confirms nothing.

// unsure is an Extend given up on (its ctx ended first) that may still
// set the lease to exactly d on the server, at any time, until a command
// of the hold with a later place (seq) is known to have run. Without
// scripts (internal/backend/plain.go) the server keeps no sequence: there it may run until
// the client library is done with it (done), and caps every confirmation
// sent before that was seen.
type unsure struct {
	d    time.Duration
	seq  int64
	done <-chan struct{}
	seen time.Time // when done was first seen closed; zero until then
}

// next gives the hold's next command its place in the sequence. h.mu is
// held.
func (h *hold) next() int64 {
	h.seq++
	return h.seq
}

func newHold(c *Client, k *protocol.Keys, what string, p backend.HoldOps, token string, fence int64, cfg lockConfig, start time.Time) *hold {
	h := &hold{c: c, k: k, what: what, acquired: start, maxFrom: start, p: p, token: token, fence: fence, renew: cfg.Renew, count: 1,
		ttl: cfg.TTL, maxHold: cfg.MaxHold, deadlineAt: slot{index: -1}, renewAt: slot{index: -1}}
	h.confirmed(start, cfg.TTL, 0)
	return h
}

// Max hold (WithMaxHold). Every command that sets the hold's lease in
// Redis — a renewal, an Extend, a re-entry — carries a TTL cut to what is
// left of the max hold when it is sent (cut), so that, counted from when
// it runs, the lease it sets ends no later than maxEnd plus that
// command's own delay on its way; a hand-off's TTL is the lease's TTL, at
// most the max hold, counted from the release, which ran before the
// hand-off reached the waiter (maxFrom). The hold counts on nothing past
// maxEnd (less the drift margin), and it is marked limited — no more
// renewals; when its deadline passes, its max hold ran out — only when a
// reply confirmed a lease that reaches maxEnd (confirmed): a command that
// failed, whose outcome is unknown, changes nothing of that, and the
// watchdog goes on renewing up to the limit. A copy of a command given up
// on that lands late is ordered by the hold's sequence (see "Late
// commands" below): after a later command ran it changes nothing; before,
// its TTL is cut like every other.

// maxEnd is when the hold's max hold runs out; zero without one.
func (h *hold) maxEnd() time.Time {
	if h.maxHold <= 0 {
		return time.Time{}
	}
	return h.maxFrom.Add(h.maxHold)
}

// cut returns ttl cut to what is left of the max hold at now, for a
// command sent then, and false when less than minTTL is left (the hold
// cannot be given any more time). Without a max hold it returns ttl.
func (h *hold) cut(ttl time.Duration, now time.Time) (time.Duration, bool) {
	if h.maxHold <= 0 {
		return ttl, true
	}
	left := h.maxEnd().Sub(now)
	if left < minTTL {
		return 0, false
	}
	return min(ttl, left), true
}

// maxHoldReached is the error of a command refused because the hold's
// max hold is (all but) over.
func (h *hold) maxHoldReached() error {
	return fmt.Errorf("%w: lock %q: its max hold (WithMaxHold %v) is reached", ErrNotHeld, h.k.Name, h.maxHold)
}

// confirmed records that a request sent at start, with place seq in the
// hold's sequence, set the lease to ttl: the server will not expire it
// before start+ttl, and the local deadline keeps a drift margin below
// that. Call with h.mu held, or before h is shared.
func (h *hold) confirmed(start time.Time, ttl time.Duration, seq int64) {
	if len(h.unsure) > 0 {
		ttl = h.capped(start, ttl, seq)
	}
	if d := start.Add(ttl - h.c.drift.Of(ttl)); d.After(h.deadline) {
		h.deadline = d
	}
	h.nextRenew = start.Add(ttl / 3)
	if h.maxHold > 0 && !start.Add(ttl).Before(h.maxEnd()) {
		h.limited = true // this lease reaches the max hold: nothing more to renew
	}
}

// newLease adds a lease to the hold. It fails when the hold has ended.
func (h *hold) newLease() (*Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, h.err
	}
	l := &Lease{of: h}
	h.leases = append(h.leases, l)
	return l, nil
}

// end ends the hold and every lease still on it with err. Only the first
// call has an effect.
func (h *hold) end(err error) {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = err
	leases := h.leases
	h.leases = nil
	h.mu.Unlock()
	for _, l := range leases {
		l.finish(err)
	}
	h.c.wd.remove(h)
	reason, why := lossOf(err)
	h.c.tel.HoldEnded(h.what, h.k.Name, h.acquired, reason, why)
}

// expireIfLate ends the hold as lost when its local deadline has passed,
// whether or not the watchdog has woken up yet to notice, and returns why
// the hold ended (nil: held).
func (h *hold) expireIfLate(now time.Time) error {
	h.mu.Lock()
	err := h.err
	late := err == nil && !now.Before(h.deadline)
	h.mu.Unlock()
	if !late {
		return err
	}
	reason, why := reasonDeadline, "no renewal confirmed before its deadline"
	switch {
	case h.limited:
		reason, why = reasonEnded, fmt.Sprintf("its max hold (WithMaxHold %v) ran out", h.maxHold)
	case !h.renew:
		reason, why = reasonEnded, "its fixed lease ran out"
	}
	h.end(lost(reason, h.k.Name, why))
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// A hold is what a single lease holds (see held).

func (h *hold) name() string { return h.k.Name }
func (h *hold) first() *hold { return h }

// check ends the hold if its deadline has passed and returns why it ended:
// a lease still on it learns that before end has told it (a lease already
// ended, unlocked say, keeps its own error: finish is once).
func (h *hold) check() error { return h.expireIfLate(time.Now()) }

func (h *hold) parts(l *Lease) []*Lease { return []*Lease{l} }

// carry returns ctx carrying l for re-entry.
func (h *hold) carry(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{h.c, h.k.Lock, h.side}, l)
}

// unlock is Lease.Unlock of one of h's leases.
func (h *hold) unlock(ctx context.Context, l *Lease) error {
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		if !errors.Is(err, ErrUnlocked) {
			// Lost: if the key is still ours (a pause outlived the
			// deadline, say), free it now rather than at its expiry.
			if h.release(ctx) != nil {
				h.c.releaseLater(h)
			}
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	left := h.count - 1
	h.releasing = left == 0
	h.mu.Unlock()
	var res int64
	var err error
	if left == 0 {
		// The hold ends now, before the release is sent: the server may
		// give the lock to another owner as soon as the release runs,
		// before its reply is back, and every lease of the hold (another
		// goroutine's, sharing a Leadership say) must stop believing it
		// holds by then. Err says ErrUnlocked from here on.
		h.end(ErrUnlocked)
		res, err = h.releaseReply(ctx).Int64()
	} else {
		r, _, _ := h.inOrder(ctx, false, func(seq int64) backend.Op { return h.p.Release(h.token, left, seq) })
		res, err = r.Int64()
	}
	if err == nil && res < 0 {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at unlock")
		h.end(err)
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	// The lease ends, whether or not the call succeeded. After a failed
	// call an inner lease's count is set right again in the background
	// (recount), and the last one's release goes on in the background.
	h.mu.Lock()
	h.count = left
	h.leases = slices.DeleteFunc(h.leases, func(x *Lease) bool { return x == l })
	h.mu.Unlock()
	l.finish(ErrUnlocked)
	if left == 0 {
		h.end(ErrUnlocked)
		if err != nil {
			h.c.releaseLater(h)
		}
	} else if err != nil {
		h.recount()
	}
	if err != nil {
		return redisErr("unlock", h.k.Name, err)
	}
	return nil
}

// recount sets the hold count in Redis to the hold's own again, after a
// re-entry or an inner unlock whose call failed: it may have run, or may
// not, or may still, late. It runs in the background, in the hold's
// sequence — a copy of the failed call that lands after it is refused
// (STALE), one that ran before is overwritten — until Redis answers, the
// hold ends, or the Client closes. It waits for a call of the hold in
// flight (h.calls) without blocking it: that call, a re-entry or an
// unlock, sets the count itself, and a later one gets a later place.
func (h *hold) recount() {
	h.c.background(func() {
		backoff := releaseMinBackoff
		wait := func() bool {
			timer := time.NewTimer(backoff)
			defer timer.Stop()
			backoff = min(2*backoff, releaseMaxBackoff)
			select {
			case <-h.c.life.Done():
				return false
			case <-timer.C:
				return true
			}
		}
		for {
			if !h.calls.TryLock() {
				if !wait() {
					return
				}
				continue
			}
			h.mu.Lock()
			count, ended := h.count, h.err != nil
			seq := h.next()
			h.mu.Unlock()
			h.calls.Unlock()
			if ended || count < 1 {
				return
			}
			ctx, cancel := context.WithTimeout(h.c.life, releaseTry)
			r := h.c.moving(ctx, func() driver.Reply { return h.c.be.Run(ctx, h.p.Release(h.token, count, seq)) })
			cancel()
			if r.Err == nil || !wait() { // set, STALE (a later command set it) or gone
				return
			}
		}
	})
}

// extend is Lease.Extend of one of h's leases.
func (h *hold) extend(ctx context.Context, l *Lease, d time.Duration) error {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	// Not past the max hold (WithMaxHold): cut to what is left of it when
	// sent, each time it is sent (inOrder). Whether the lease now reaches
	// the limit is known only from the reply (confirmed): a call that
	// fails leaves the hold as it was, renewed up to the limit.
	if _, ok := h.cut(d, time.Now()); !ok {
		return h.maxHoldReached()
	}
	want := d
	r, seq, start := h.inOrderAt(ctx, true, func(seq int64, start time.Time) backend.Op {
		d, _ = h.cut(want, start)
		d = max(d, minTTL) // what is left fell below 1 ms since the check: overshoot by that much at most
		return h.p.Renew(h.token, d, true, seq)
	})
	ok, err := r.Int64()
	if err != nil {
		h.mayHaveSet(start, d, seq, transport.Settled(err))
		return redisErr("extend", h.k.Name, err)
	}
	if ok != 1 {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at extend")
		h.end(err)
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	h.ttl = d
	h.epoch++                // a renewal in flight may have run before this
	h.deadline = time.Time{} // a shorter lease moves the deadline closer
	h.confirmed(start, d, seq)
	h.c.wd.reschedule(h)
	h.mu.Unlock()
	return nil
}

// mayHaveSet records an Extend sent at start, with place seq, that sets
// the lease to exactly d and whose outcome is unknown: given up on, it
// may still run on the server, at any time until a command with a later
// place has run, and set the lease to d from then — shorter than what the
// hold counts on, or than what a later renewal confirms. So the local
// deadline moves to start+d (less the drift margin) if that is closer,
// the next renewal comes within d/3 (its later place settles the Extend
// once it runs), and until then no confirmation counts on more than d
// (capped). The hold never believes in more than the server may give it.
func (h *hold) mayHaveSet(start time.Time, d time.Duration, seq int64, done <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsure = append(h.unsure, unsure{d: d, seq: seq, done: done})
	if dl := start.Add(d - h.c.drift.Of(d)); dl.Before(h.deadline) {
		h.deadline = dl
	}
	if next := start.Add(d / 3); next.Before(h.nextRenew) {
		h.nextRenew = next
	}
	h.c.wd.reschedule(h)
}

// capped caps ttl, confirmed by the command with place seq sent at
// start, by the Extends that may still set the lease (see mayHaveSet).
// An Extend stops capping once a command with a later place ran: it can
// never run after that. h.mu is held.
func (h *hold) capped(start time.Time, ttl time.Duration, seq int64) time.Duration {
	h.settle(start, seq)
	for _, u := range h.unsure {
		ttl = min(ttl, u.d)
	}
	return ttl
}

// settle forgets the Extends given up on that can no longer run: those
// with a place below seq, a command with place seq (sent at start) having
// run or met a later one. Without a sequence on the server, those seen
// done on the client's side before start. h.mu is held.
func (h *hold) settle(start time.Time, seq int64) {
	if h.p.Ordered() {
		h.unsure = slices.DeleteFunc(h.unsure, func(u unsure) bool { return u.seq < seq })
		return
	}
	now := time.Now()
	keep := h.unsure[:0]
	for _, u := range h.unsure {
		if u.seen.IsZero() {
			select {
			case <-u.done:
				u.seen = now
			default:
			}
		}
		if u.seen.IsZero() || start.Before(u.seen) {
			keep = append(keep, u)
		}
	}
	h.unsure = keep
}

// inOrder runs a command of the hold that carries its place in the
// hold's sequence (built by cmd), as a grant if grant is set (it makes
// or extends the hold: with replica sync, acknowledged): again with a new place
// while the server answers STALE (a renewal sent meanwhile ran first),
// until ctx ends. It returns the last reply, that command's place and
// when it was sent.
func (h *hold) inOrder(ctx context.Context, grant bool, cmd func(seq int64) backend.Op) (r driver.Reply, seq int64, start time.Time) {
	return h.inOrderAt(ctx, grant, func(seq int64, _ time.Time) backend.Op { return cmd(seq) })
}

// inOrderAt is inOrder for a command that depends on when it is sent
// (start: a TTL cut to the max hold).
func (h *hold) inOrderAt(ctx context.Context, grant bool, cmd func(seq int64, start time.Time) backend.Op) (r driver.Reply, seq int64, start time.Time) {
	for {
		h.mu.Lock()
		seq = h.next()
		h.mu.Unlock()
		start = time.Now()
		o := cmd(seq, start)
		r = h.c.moving(ctx, func() driver.Reply {
			if grant {
				return h.c.be.Grant(ctx, o)
			}
			return h.c.be.Run(ctx, o)
		})
		if !isStale(r) {
			return r, seq, start
		}
		h.mu.Lock()
		h.settle(start, seq)
		h.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return protocol.FailedReply(err), seq, start
		}
	}
}

// isStale reports whether r is a STALE reply: -4 or {-4}.
func isStale(r driver.Reply) bool {
	if r.Err != nil {
		return false
	}
	switch v := r.Val.(type) {
	case int64:
		return v == protocol.ReplyStale
	case []any:
		return len(v) == 1 && v[0] == int64(protocol.ReplyStale)
	}
	return false
}

// ttlLeft is Lease.TTL of one of h's leases.
func (h *hold) ttlLeft(ctx context.Context, l *Lease) (time.Duration, error) {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := l.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	ms, err := h.c.moving(ctx, func() driver.Reply { return h.c.be.Run(ctx, h.p.TTL(h.token)) }).Int64()
	if err != nil {
		return 0, redisErr("ttl", h.k.Name, err)
	}
	if ms == protocol.ReplyTTLNotHeld {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held")
		h.end(err)
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
