package hold

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/errs"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// Hold is one owner's possession of a lock in Redis: a token with a hold
// count. Re-entry adds leases to the same hold; the hold ends when its last
// lease is unlocked, or for all of its leases at once when it is lost.
// Its leases are dlock.Lease handles, which it knows by their End.
type Hold struct {
	// Set when it is made, read-only after: no lock.
	c        *Keeper
	k        *protocol.Keys
	p        backend.HoldOps
	token    string
	fence    int64
	acquired int64 // when the attempt that took it was sent (mono, schedule.go)
	rare     *rare // its max hold and burial: noRare for the many holds that have neither

	// calls serialises the calls that set the hold count in Redis (re-entry
	// and unlock), so that the count they send is the one they read.
	calls sync.Mutex

	// Guarded by mu.
	mu        sync.Mutex
	ttl       time.Duration // lease length used by renewals
	deadline  int64         // local: the lease may be gone after this (mono, schedule.go; longAgo until confirmed)
	nextRenew int64         // when the watchdog renews it next (mono)
	seq       int64         // the last place given in the hold's sequence (see next)
	unsure    *[]unsure     // Extends given up on that may still set the lease (see mayHaveSet); nil: none
	err       error         // why the hold ended; nil while held
	leases    []*End        // its leases' ends; unlocked ones are removed (few: one per re-entry)
	leases1   [1]*End       // leases' first array (no allocation for a hold never re-entered)
	count     int32         // holds in Redis (written under calls too)
	epoch     int32         // bumped by Extend: older renewals confirm nothing

	// Guarded by the watchdog's mu: its indexes in the watchdog's
	// schedules, byDeadline and byRenewal (schedule.go); -1: not in.
	index [2]int32

	// Its flags, side and primitive, together in one word (a hold per
	// lease: 100 000 held leases cost 100 000 of these). The first four
	// are set when it is made, read-only after; the last three are
	// guarded by mu.
	what      uint8 // the primitive, for telemetry: its place in whats (Spec.What)
	side      byte  // the side of an RWMutex hold ('r' or 'w', Spec.Side); 0 for other locks
	renew     bool  // the watchdog renews it
	handed    bool  // a release handed it over (acquisition.HandedOver), no attempt of its own took it
	limited   bool  // a confirmed lease reaches its max hold: when it runs out, the max hold did (set by confirmed only)
	renewing  bool  // a renewal of it is in flight
	releasing bool  // its final Unlock is in flight: a renewal that finds it gone is not a loss

	// own is its first lease's End (FirstEnd), guarded by its own mu; a
	// re-entered lease brings its own.
	own End
}

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
func (h *Hold) next() int64 {
	h.seq++
	return h.seq
}

// rare are the settings of a hold that few holds have, behind one
// pointer (a hold per held lease): noRare, shared, for those that have
// none. Set when the hold is made, read-only after.
type rare struct {
	maxHold time.Duration // WithMaxHold: no command sets its lease past maxFrom+maxHold (maxEnd); 0: none
	buryFor time.Duration // its final release buries the token first, for this long (buryFirst); 0: not
	// maxFrom is when its max hold began (mono): acquired, or, for a hold
	// handed over by a release, when the hand-off reached the waiter.
	maxFrom int64
}

var noRare = &rare{} // never written

// whats are the primitives' names (Spec.What) that holds were made for,
// each kept once: a hold keeps its place here, one byte, not a string's
// 16 (the root names a handful of primitives).
var whats struct {
	mu    sync.Mutex
	names atomic.Pointer[[]string]
}

// whatOf is what's place in whats, added if new.
func whatOf(what string) uint8 {
	if p := whats.names.Load(); p != nil {
		if i := slices.Index(*p, what); i >= 0 {
			return uint8(i)
		}
	}
	whats.mu.Lock()
	defer whats.mu.Unlock()
	var names []string
	if p := whats.names.Load(); p != nil {
		names = *p
	}
	if i := slices.Index(names, what); i >= 0 {
		return uint8(i)
	}
	if len(names) > math.MaxUint8 {
		panic("dlock: more than 256 names of primitives given to holds")
	}
	names = append(slices.Clip(names), what)
	whats.names.Store(&names)
	return uint8(len(names) - 1)
}

// unsures are the Extends given up on that may still set the lease;
// setUnsures keeps us as them (nil when empty). h.mu is held.
func (h *Hold) unsures() []unsure {
	if h.unsure == nil {
		return nil
	}
	return *h.unsure
}

func (h *Hold) setUnsures(us []unsure) {
	switch {
	case len(us) == 0:
		h.unsure = nil
	case h.unsure == nil:
		h.unsure = &us
	default:
		*h.unsure = us
	}
}

// Spec is what an acquire that took a lock knows of its hold.
type Spec struct {
	Keys  *protocol.Keys
	What  string // the primitive, for telemetry
	Ops   backend.HoldOps
	Token string
	Fence int64
	Cfg   backend.LockConfig
	Side  string    // an RWMutex hold's side, one byte ("r" or "w"); "" for other locks
	Start time.Time // when the attempt that took it was sent
	// Handed: a release handed it over (no attempt of its own took it).
	Handed bool
	// TTL, when set, is the lease the grant confirmed (a hand-off's);
	// MaxFrom, when set, is when its max hold began (a hand-off's arrival).
	TTL     time.Duration
	MaxFrom time.Time
	// BuryFor, when set, buries the token for that long before the final
	// release (an attempt of its acquire may still reach the server: see
	// "Acquires sent twice" in internal/acquisition/doc.go).
	BuryFor time.Duration
}

// newHold makes the hold that s describes, not yet watched.
func newHold(c *Keeper, s Spec) *Hold {
	h := &Hold{c: c, k: s.Keys, what: whatOf(s.What), acquired: mono(s.Start), rare: noRare, p: s.Ops, token: s.Token, fence: s.Fence,
		renew: s.Cfg.Renew, count: 1, ttl: s.Cfg.TTL, side: sideByte(s.Side), handed: s.Handed,
		deadline: longAgo, index: [2]int32{-1, -1}}
	if s.Cfg.MaxHold > 0 || s.BuryFor > 0 {
		h.rare = &rare{maxHold: s.Cfg.MaxHold, buryFor: s.BuryFor, maxFrom: mono(s.Start)}
		if !s.MaxFrom.IsZero() {
			h.rare.maxFrom = mono(s.MaxFrom)
		}
	}
	h.leases = h.leases1[:0]
	h.confirmed(s.Start, s.Cfg.TTL, 0)
	if s.TTL > 0 || !s.MaxFrom.IsZero() {
		h.deadline, h.limited = longAgo, false
		h.confirmed(s.Start, cmp.Or(s.TTL, s.Cfg.TTL), 0)
	}
	return h
}

// Token is the hold's owner token.
func (h *Hold) Token() string { return h.token }

// Fence is the hold's fencing token.
func (h *Hold) Fence() int64 { return h.fence }

// Keys are the keys of the hold's lock.
func (h *Hold) Keys() *protocol.Keys { return h.k }

// What is the primitive that took it, for telemetry.
func (h *Hold) What() string { return (*whats.names.Load())[h.what] }

// Side is an RWMutex hold's side; "" for other locks.
func (h *Hold) Side() string {
	switch h.side {
	case 'r':
		return "r"
	case 'w':
		return "w"
	}
	return "" // (constants: string(rune(h.side)) would allocate where it escapes)
}

// sideByte is a side as Hold keeps it: its one byte (Spec.Side: "r" or
// "w", the root package's sideRead and sideWrite; Side gives them back);
// 0 for "".
func sideByte(side string) byte {
	if side == "" {
		return 0
	}
	return side[0]
}

// Handed reports whether a release handed the hold over: no attempt of
// its own took it.
func (h *Hold) Handed() bool { return h.handed }

// FirstEnd is the End of the hold's first lease, which Keeper.Keep
// attached: it lives in the hold (one allocation fewer per lock).
func (h *Hold) FirstEnd() *End { return &h.own }

// Keeper is the keeper of the Client the hold belongs to.
func (h *Hold) Keeper() *Keeper { return h.c }

// NeverValid reports whether the hold's lease is too short for any grant
// to be valid when its reply comes: its TTL is within the drift margin.
func (h *Hold) NeverValid() bool { return h.ttl <= h.c.drift.Of(h.ttl) }

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
func (h *Hold) maxEnd() time.Time {
	if h.rare.maxHold <= 0 {
		return time.Time{}
	}
	return fromMono(h.rare.maxFrom).Add(h.rare.maxHold)
}

// cut returns ttl cut to what is left of the max hold at now, for a
// command sent then, and false when less than MinTTL is left (the hold
// cannot be given any more time). Without a max hold it returns ttl.
func (h *Hold) cut(ttl time.Duration, now time.Time) (time.Duration, bool) {
	if h.rare.maxHold <= 0 {
		return ttl, true
	}
	left := h.maxEnd().Sub(now)
	if left < MinTTL {
		return 0, false
	}
	return min(ttl, left), true
}

// maxHoldReached is the error of a command refused because the hold's
// max hold is (all but) over.
func (h *Hold) maxHoldReached() error {
	return fmt.Errorf("%w: lock %q: its max hold (WithMaxHold %v) is reached", errs.NotHeld, h.k.Name, h.rare.maxHold)
}

// confirmed records that a request sent at start, with place seq in the
// hold's sequence, set the lease to ttl: the server will not expire it
// before start+ttl, and the local deadline keeps a drift margin below
// that. Call with h.mu held, or before h is shared.
func (h *Hold) confirmed(start time.Time, ttl time.Duration, seq int64) {
	if h.unsure != nil {
		ttl = h.capped(start, ttl, seq)
	}
	if d := mono(start.Add(ttl - h.c.drift.Of(ttl))); d > h.deadline {
		h.deadline = d
	}
	h.nextRenew = mono(start.Add(ttl / 3))
	if h.rare.maxHold > 0 && !start.Add(ttl).Before(h.maxEnd()) {
		h.limited = true // this lease reaches the max hold: nothing more to renew
	}
}

// Attach adds a lease, known by its End, to the hold. It fails when the
// hold has ended.
func (h *Hold) Attach(e *End) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	h.leases = append(h.leases, e)
	return nil
}

// end ends the hold and every lease still on it with err. Only the first
// call has an effect.
func (h *Hold) end(err error) {
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
		l.Finish(err)
	}
	h.c.wd.remove(h)
	reason, why := lossOf(err)
	h.c.tel.HoldEnded(h.What(), h.k.Name, fromMono(h.acquired), reason, why)
}

// expireIfLate ends the hold as lost when its local deadline has passed,
// whether or not the watchdog has woken up yet to notice, and returns why
// the hold ended (nil: held).
func (h *Hold) expireIfLate(now time.Time) error {
	h.mu.Lock()
	err := h.err
	late := err == nil && mono(now) >= h.deadline
	h.mu.Unlock()
	if !late {
		return err
	}
	reason, why := reasonDeadline, "no renewal confirmed before its deadline"
	switch {
	case h.limited:
		reason, why = reasonEnded, fmt.Sprintf("its max hold (WithMaxHold %v) ran out", h.rare.maxHold)
	case !h.renew:
		reason, why = reasonEnded, "its fixed lease ran out"
	}
	h.end(lost(reason, h.k.Name, why))
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// A hold is what a single lease holds (dlock's held).

// Name is the lock's name.
func (h *Hold) Name() string { return h.k.Name }

// First is h: a single lease shows its own hold's token and fence.
func (h *Hold) First() *Hold { return h }

// Check ends the hold if its deadline has passed and returns why it ended:
// a lease still on it learns that before end has told it (a lease already
// ended, unlocked say, keeps its own error: Finish is once).
func (h *Hold) Check() error { return h.expireIfLate(time.Now()) }

// leaseErr is the Err of h's lease e: h's end, if it has ended without
// telling e yet, else e's own.
func (h *Hold) leaseErr(e *End) error {
	if err := h.Check(); err != nil {
		e.Finish(err)
	}
	return e.Err()
}

// Unlock is Lease.Unlock of one of h's leases, known by its End.
func (h *Hold) Unlock(ctx context.Context, l *End) error {
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := h.leaseErr(l); err != nil {
		if !errors.Is(err, errs.Unlocked) {
			// Lost: if the key is still ours (a pause outlived the
			// deadline, say), free it now rather than at its expiry.
			if h.release(ctx) != nil {
				h.c.releaseLater(h)
			}
		}
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
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
		// holds by then. Err says errs.Unlocked from here on.
		h.end(errs.Unlocked)
		res, err = h.releaseReply(ctx).Int64()
	} else {
		r, _, _ := h.inOrder(ctx, false, func(seq int64) backend.Op { return h.p.Release(h.token, int(left), seq) })
		res, err = r.Int64()
	}
	if err == nil && res < 0 {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at unlock")
		h.end(err)
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	// The lease ends, whether or not the call succeeded. After a failed
	// call an inner lease's count is set right again in the background
	// (recount), and the last one's release goes on in the background.
	h.mu.Lock()
	h.count = left
	h.leases = slices.DeleteFunc(h.leases, func(x *End) bool { return x == l })
	h.mu.Unlock()
	l.Finish(errs.Unlocked)
	if left == 0 {
		h.end(errs.Unlocked)
		if err != nil {
			h.c.releaseLater(h)
		}
	} else if err != nil {
		h.recount()
	}
	if err != nil {
		return errs.Redis("unlock", h.k.Name, err)
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
func (h *Hold) recount() {
	h.c.Background(func() {
		pause := backoff.New(releaseMinBackoff, releaseMaxBackoff)
		wait := func() bool {
			timer := time.NewTimer(pause.Next())
			defer timer.Stop()
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
			r := h.c.run(ctx, false, h.p.Release(h.token, int(count), seq))
			cancel()
			if r.Err == nil || !wait() { // set, STALE (a later command set it) or gone
				return
			}
		}
	})
}

// Extend is Lease.Extend of one of h's leases, known by its End.
func (h *Hold) Extend(ctx context.Context, l *End, d time.Duration) error {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := h.leaseErr(l); err != nil {
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
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
		d = max(d, MinTTL) // what is left fell below 1 ms since the check: overshoot by that much at most
		return h.p.Renew(h.token, d, true, seq)
	})
	ok, err := r.Int64()
	if err != nil {
		h.mayHaveSet(start, d, seq, transport.Settled(err))
		return errs.Redis("extend", h.k.Name, err)
	}
	if ok != 1 {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at extend")
		h.end(err)
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	h.mu.Lock()
	h.ttl = d
	h.epoch++            // a renewal in flight may have run before this
	h.deadline = longAgo // a shorter lease moves the deadline closer
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
func (h *Hold) mayHaveSet(start time.Time, d time.Duration, seq int64, done <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setUnsures(append(h.unsures(), unsure{d: d, seq: seq, done: done}))
	if dl := mono(start.Add(d - h.c.drift.Of(d))); dl < h.deadline {
		h.deadline = dl
	}
	if next := mono(start.Add(d / 3)); next < h.nextRenew {
		h.nextRenew = next
	}
	h.c.wd.reschedule(h)
}

// capped caps ttl, confirmed by the command with place seq sent at
// start, by the Extends that may still set the lease (see mayHaveSet).
// An Extend stops capping once a command with a later place ran: it can
// never run after that. h.mu is held.
func (h *Hold) capped(start time.Time, ttl time.Duration, seq int64) time.Duration {
	h.settle(start, seq)
	for _, u := range h.unsures() {
		ttl = min(ttl, u.d)
	}
	return ttl
}

// settle forgets the Extends given up on that can no longer run: those
// with a place below seq, a command with place seq (sent at start) having
// run or met a later one. Without a sequence on the server, those seen
// done on the client's side before start. h.mu is held.
func (h *Hold) settle(start time.Time, seq int64) {
	if h.p.Ordered() {
		h.setUnsures(slices.DeleteFunc(h.unsures(), func(u unsure) bool { return u.seq < seq }))
		return
	}
	now := time.Now()
	keep := h.unsures()[:0]
	for _, u := range h.unsures() {
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
	h.setUnsures(keep)
}

// inOrder runs a command of the hold that carries its place in the
// hold's sequence (built by cmd), as a grant if grant is set (it makes
// or extends the hold: with replica sync, acknowledged): again with a new place
// while the server answers STALE (a renewal sent meanwhile ran first),
// until ctx ends. It returns the last reply, that command's place and
// when it was sent.
func (h *Hold) inOrder(ctx context.Context, grant bool, cmd func(seq int64) backend.Op) (r driver.Reply, seq int64, start time.Time) {
	return h.inOrderAt(ctx, grant, func(seq int64, _ time.Time) backend.Op { return cmd(seq) })
}

// inOrderAt is inOrder for a command that depends on when it is sent
// (start: a TTL cut to the max hold).
func (h *Hold) inOrderAt(ctx context.Context, grant bool, cmd func(seq int64, start time.Time) backend.Op) (r driver.Reply, seq int64, start time.Time) {
	for {
		h.mu.Lock()
		seq = h.next()
		h.mu.Unlock()
		start = time.Now()
		o := cmd(seq, start)
		r = h.c.askAgain(ctx, grant, o, h.c.run(ctx, grant, o)) // the same place: a copy answers 'again'
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

// TTLLeft is Lease.TTL of one of h's leases, known by its End.
func (h *Hold) TTLLeft(ctx context.Context, l *End) (time.Duration, error) {
	h.calls.Lock() // after an Unlock in flight, not beside it
	defer h.calls.Unlock()
	if err := h.leaseErr(l); err != nil {
		return 0, fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	ms, err := h.c.run(ctx, false, h.p.TTL(h.token)).Int64()
	if err != nil {
		return 0, errs.Redis("ttl", h.k.Name, err)
	}
	if ms == protocol.ReplyTTLNotHeld {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held")
		h.end(err)
		return 0, fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Reenter adds a lease, known by e, to the hold that the lease known by
// outer belongs to: the hold count goes up by one in Redis and the lease
// gets the hold's token and fence.
func (h *Hold) Reenter(ctx context.Context, outer, e *End) error {
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := h.leaseErr(outer); err != nil {
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	h.mu.Lock()
	count, want, epoch := h.count+1, h.ttl, h.epoch
	h.mu.Unlock()
	// A re-entry renews the hold's lease, as the watchdog does: no further
	// than its max hold (WithMaxHold), cut when sent.
	if _, ok := h.cut(want, time.Now()); !ok {
		return h.maxHoldReached()
	}
	var ttl time.Duration
	r, seq, start := h.inOrderAt(ctx, true, func(seq int64, start time.Time) backend.Op {
		ttl, _ = h.cut(want, start)
		ttl = max(ttl, MinTTL)
		return h.p.(backend.Reentrant).Reenter(h.token, int(count), ttl, seq)
	})
	res, err := r.Int64Slice()
	if err != nil {
		// The hold count in Redis may or may not be count now, or may
		// become it when this call lands late: recount sets it right
		// again (in the hold's sequence: this call, if late, changes
		// nothing after it). A re-entry only ever lengthens the lease.
		h.recount()
		return errs.Redis("lock", h.k.Name, err)
	}
	if len(res) < 1 || res[0] != protocol.ReplyHeld {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at re-entry")
		h.end(err)
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	if err := h.Attach(e); err != nil {
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	h.mu.Lock()
	h.count = count
	if h.epoch == epoch {
		h.confirmed(start, ttl, seq)
		h.c.wd.reschedule(h)
	}
	h.mu.Unlock()
	if err := h.leaseErr(e); err != nil {
		// the reply came after the hold's deadline: the hold is lost
		// (the root's valid, acquire.go), and this lease with it
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	return nil
}

// Record runs cmd, a command that writes a value of the hold (an
// Election's Proclaim: op names it), in the hold's sequence (see "Late
// commands": one given up on that reaches the server after a later one
// is refused there), beside no Unlock; e knows the lease it runs for.
func (h *Hold) Record(ctx context.Context, e *End, op string, cmd func(seq int64) backend.Op) error {
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := h.leaseErr(e); err != nil {
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	r, _, _ := h.inOrder(ctx, true, cmd)
	if r.Err != nil {
		return errs.Redis(op, h.k.Name, r.Err)
	}
	if v, _ := r.Slice(); len(v) == 0 || v[0] != int64(protocol.ReplyHeld) {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at "+op)
		h.end(err)
		return fmt.Errorf("%w: %w", errs.NotHeld, err)
	}
	return nil
}

// MinTTL is the shortest lease (and Extend) a hold is given.
const MinTTL = time.Millisecond
