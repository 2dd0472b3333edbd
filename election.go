package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/kinds"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Election is leader election on one name: candidates Campaign, one at a
// time leads, everyone can read who leads (Leader) and follow it
// (Observe). It is a handle, safe for concurrent use and cheap to make.
//
// A leadership is a hold of a fair lock (see FairMutex): candidates are
// served in arrival order, a resigning leader hands the lock straight to
// the next candidate and wakes it alone, a leader's lease is renewed by
// the watchdog (or fixed, WithLease) and its loss is signalled by Done,
// Err and Context before another candidate can win. Its term is the
// lock's fencing token: strictly increasing across leaders, to be handed
// to whatever the leader writes to. The leader's value (an address, say)
// lives in the lock's own hash, so it goes when the leadership goes.
//
// A winner counts as leader once its value is recorded: by the attempt
// that took the lock, in the same script, or, when a resigning leader's
// release handed it the lock, a round trip later (the release does not
// know its value); Leader and Observe report nobody in between. A
// candidate whose Campaign fails after its attempt won (its ctx ended
// before the reply, or the reply came after the lease's local deadline)
// is reported as leader until the Campaign has given the lock back,
// which it does before it returns unless Redis does not answer in time
// (see Campaign).
// Elections need scripts: a Client made WithoutScripts or NewQuorum
// refuses them.
//
// In Redis the election is the hash "<prefix>:{<name>}:election" (owner
// token -> hold count, when taken, fence (the term), value), with ":queue"
// and ":alive" beside it as for a Mutex, and observers listen on ":ch".
type Election struct {
	handle
	req *request // its Campaigns' request, made once, but for the value (request)
}

// Election returns the handle of the election called name. opts set the
// defaults of its Campaigns: a lease of 30 s renewed every 10 s unless
// they say otherwise (WithTTL, WithLease, WithQueueTTL).
func (c *Client) Election(name string, opts ...LockOption) *Election {
	e := &Election{handle: handle{c, c.keys(protocol.ElectionKind, name), opts}}
	r := c.mutexRequest("Election", e.k, e.opts, true)
	r.Ops = kinds.Election{M: r.Ops.(kinds.Mutex)}
	r.once = true // a win already lost is an error (see Campaign)
	e.req = r
	return e
}

// electionKind is what Inspect, Locks and ForceUnlock know of an
// Election: a Mutex's hold with the leader's value; a forced release also
// tells its observers.
var electionKind = kindSpec{primitive: "Election", keys: protocol.ElectionKind, queue: true, fill: mutexHolders,
	force: func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply {
		w := c.wakeTo(k)
		return protocol.ForceArgs{Wake: w, ID: rc.id, ReceiptTTL: rc.ttl, Election: true, Observers: k.Channel}.Call(k).Run(ctx, r)
	}}

// request is what a Campaign for value tells the acquire path: a
// FairMutex's request, under the election's keys and protocol, whose
// attempts record value (and its label) when they win (lock.lua's ARGV[11]): a Campaign
// that nobody stands in the way of is one round trip.
func (e *Election) request(value string) *request {
	r := *e.req // a copy: its call is this Campaign's
	m := r.Ops.(kinds.Election).M
	labels := e.c.labels()
	r.Call = func(token, member string, queued bool, cfg lockConfig) protocol.Call {
		a := m.LockArgs(token, cfg.TTL, 0, member, queued, placeTTL(cfg, member), true)
		label := ""
		if labels {
			label = cfg.Label
		}
		a.Campaign, a.Tail, a.Observers = true, protocol.HoldTail(label, value, true), e.k.Channel
		return a.Acquire(e.k)
	}
	return &r
}

// Campaign waits until this caller leads, then records value as the
// leader's and returns the Leadership. Candidates are served in arrival
// order; the wait is woken by the release that hands the lock on, with no
// polling.
//
// A Campaign on a Client that leads the election already (through any
// handle of it) does not wait for itself: it proclaims value on that
// leadership and returns it (so Resign of either ends both), as etcd
// does for a session that campaigns again. A Campaign begun before this
// Client led is a candidate like any other.
//
// When ctx ends first Campaign returns an error matching ErrNotObtained
// and ctx.Err(), and nothing of the candidate is left in Redis: its place
// in the queue is given up (and a lock won meanwhile released) before
// Campaign returns — within ctx, or within 20 ms after it ended — or in
// the background when Redis does not answer by then. The same holds for every other failure: a Redis error (wrapped),
// ErrClosed when the Client closes during the wait, or the lease lost
// before the value was recorded (matching ErrNotObtained and
// ErrLeaseLost): a Campaign never returns a Leadership that has ended.
// Bad input (a nil ctx, an empty name) matches ErrInvalidArgument; a
// Client made WithoutScripts or NewQuorum refuses with an error matching
// errors.ErrUnsupported.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if e == nil || e.c == nil {
		return nil, invalid("nil Election")
	}
	if cur, ok := e.c.leading.Load(e.k.Lock); ok && checkCall(ctx, e.c, e.k.Name) == nil {
		// This Client leads already: a second candidate would wait for
		// its own leadership forever. Proclaim, as etcd does for a
		// session that campaigns again.
		ld := cur.(*Leadership)
		if err := ld.Proclaim(ctx, value); err == nil || ld.Err() == nil {
			if err != nil {
				return nil, err
			}
			return ld, nil
		}
		// it ended meanwhile: campaign as a new candidate
	}
	l, err := e.c.acquire(ctx, e.request(value), true, nil)
	if err != nil {
		return nil, err
	}
	ld := &Leadership{e: e, l: l, value: value}
	// The attempt that won recorded value (lock.lua) unless a release
	// handed the lock over, which does not know it.
	if l.of.First().Handed() {
		err = ld.record(ctx, value)
	}
	if err == nil && l.Err() != nil {
		// recorded, but the reply came after the lease's local deadline
		err = fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
	}
	if err != nil {
		// Not a leader after all: give the lock back before returning,
		// as an acquire's undo does (hold.Keeper.Undo, graced): within ctx, or,
		// when ctx has ended, within undoGrace more — never with the ended
		// ctx, which sends nothing. Only when Redis does not answer by then
		// does the release go on in the background (Lease.Unlock).
		uctx, cancel := hold.Graced(ctx)
		_ = l.Unlock(uctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, waitEnded(e.k.Name, ctx.Err())
		case errors.Is(err, ErrLeaseLost):
			return nil, wonButLost(e.k.Name, err)
		}
		return nil, err
	}
	e.c.leading.Store(e.k.Lock, ld)
	l.end.WhenDone(func(error) { e.c.leading.CompareAndDelete(e.k.Lock, ld) })
	return ld, nil
}

// Leadership is one candidate's term as leader, from a Campaign that won
// until Resign, or until its lease is lost (Done, Err). It is safe for
// concurrent use.
type Leadership struct {
	e *Election
	l *Lease

	mu    sync.Mutex
	value string // as last recorded

	resignOnce  sync.Once
	resignedErr error
}

// Term is the leadership's fencing token: it increases strictly with each
// leader of the election, and never goes back. Pass it to whatever the
// leader writes to, and have that refuse a term lower than one it has
// seen: a leader that lost its lease without knowing (paused, cut off)
// then cannot act as leader.
func (ld *Leadership) Term() int64 { return ld.l.Fence() }

// Fence is Term: a leadership's fencing token, for the guards of package
// fence (a leader's writes carry its term).
func (ld *Leadership) Fence() int64 { return ld.l.Fence() }

// Value is the leader's value as last recorded by Campaign or Proclaim.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Done returns a channel that is closed when the leadership ends:
// resigned, or lost as soon as it may have been (see Lease.Done).
func (ld *Leadership) Done() <-chan struct{} { return ld.l.Done() }

// Err is nil while the leadership lasts; afterwards it matches
// ErrUnlocked (Resign), ErrLeaseLost or ErrClosed, as Lease.Err.
func (ld *Leadership) Err() error { return ld.l.Err() }

// Context returns a context derived from parent that is cancelled when
// the leadership ends: run the leader's work under it. A Campaign of the
// same election from the same Client, through it or not, proclaims on
// this leadership instead of waiting (see Campaign).
func (ld *Leadership) Context(parent context.Context) context.Context {
	return ld.l.Context(parent)
}

// Proclaim changes the leader's value, as one round trip, and tells the
// observers. It is refused with an error matching ErrNotHeld once the
// leadership has ended (matching Err too), or when Redis finds it lost
// (the leadership then ends, ErrLeaseLost). A Redis error comes back
// wrapped, and the value may or may not have changed in Redis; Value
// changes only when Proclaim succeeds.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if ctx == nil {
		return invalid("nil context")
	}
	return ld.record(ctx, value)
}

// record writes value as the leader's (elect.lua): after Campaign won,
// and at Proclaim. It runs beside no Resign (the hold's calls lock).
func (ld *Leadership) record(ctx context.Context, value string) error {
	h, k := ld.l.of.First(), ld.e.k
	err := h.Record(ctx, ld.l.end, "proclaim", func(seq int64) backend.Op {
		return protocol.ElectArgs{Token: h.Token(), Value: value, Observers: k.Channel, Publish: ld.e.c.publish, Seq: seq}.Call(k)
	})
	if err != nil {
		return err
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	return nil
}

// Resign ends the leadership: the lock goes to the next candidate, and
// observers are told. Whatever Resign returns the leadership has ended
// when it returns (Err matches ErrUnlocked, or why it ended before), as
// after Lease.Unlock: a release that fails (ctx ended, Redis unreachable)
// is retried in the background until the lease would have expired. It
// returns that Redis error, wrapped, or an error matching ErrNotHeld when
// the leadership had already been lost. Resign is idempotent: later
// calls do nothing and return what the first returned. A Campaign on
// the Client that leads, through the leadership's Context or not,
// returns this same Leadership (see Campaign): Resign of either ends
// both.
func (ld *Leadership) Resign(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	ld.resignOnce.Do(func() { ld.resignedErr = ld.l.Unlock(ctx) })
	return ld.resignedErr
}

// LeaderInfo is who leads an election at one moment. A zero Term means
// nobody leads.
type LeaderInfo struct {
	Value string        // the leader's value (Campaign, Proclaim)
	Term  int64         // the leader's term: its fencing token
	Since time.Time     // when it won: by its Client's clock if its first attempt did, else by the server's (Holder.Since)
	TTL   time.Duration // how long its lease had left when read
	// Owner is who the leader is (host, pid, program, label), nil when
	// its Client did not record it, or when the reader's ACL user may not
	// read the owner records (<prefix>:client:*).
	Owner *Owner
	// Err is set only in what Observe sends when it can no longer read
	// the election (Redis down or unreachable): the other fields are then
	// the last state it read, which may be stale. It is sent once when
	// reads start failing; the next successful read sends the state again,
	// with Err nil.
	Err error
}

// Leader reads who leads the election, as one script call (and one more
// to read the leader's owner record). It returns an error matching
// ErrNoLeader when nobody leads, and a wrapped Redis error when the
// read fails. An ACL user granted only the election's keys, not the
// owner records (<prefix>:client:*), reads the leader with a nil Owner.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if e == nil || e.c == nil {
		return LeaderInfo{}, invalid("nil Election")
	}
	if err := checkCall(ctx, e.c, e.k.Name); err != nil {
		return LeaderInfo{}, err
	}
	info, _, err := e.read(ctx, nil)
	if err == nil && info.Term == 0 {
		err = fmt.Errorf("%w: %q", ErrNoLeader, e.k.Name)
	}
	return info, err
}

// read reads who leads (elect_read.lua), and within how long that may
// change by itself: when the lock expires (0: not by itself). The owner
// record is read unless known has the same term: its owner is reused.
func (e *Election) read(ctx context.Context, known *LeaderInfo) (LeaderInfo, time.Duration, error) {
	if err := e.c.caps.Supports("Election"); err != nil {
		return LeaderInfo{}, 0, err
	}
	r, err := e.c.reader()
	if err != nil {
		return LeaderInfo{}, 0, err
	}
	k := e.k
	v, err := protocol.ElectReadArgs{}.Call(k).Run(ctx, r).Slice()
	if err != nil {
		return LeaderInfo{}, 0, redisErr("read the leader of", k.Name, err)
	}
	word := func(i int) string {
		if i >= len(v) {
			return ""
		}
		s, _ := v[i].(string)
		return s
	}
	num := func(i int) int64 {
		if i < len(v) {
			if n, ok := v[i].(int64); ok {
				return n
			}
		}
		n, _ := strconv.ParseInt(word(i), 10, 64)
		return n
	}
	if num(0) != protocol.ReplyHeld {
		return LeaderInfo{}, max(time.Duration(num(1))*time.Millisecond, 0), nil
	}
	tok := word(1)
	info := LeaderInfo{Value: word(2), Term: num(3), TTL: time.Duration(num(5)) * time.Millisecond}
	if ms := num(4); ms > 0 {
		info.Since = time.UnixMilli(ms)
	}
	if known != nil && known.Term == info.Term && known.Term != 0 {
		info.Owner = known.Owner
	} else {
		li := &LockInfo{Name: k.Name, Holders: []Holder{{Token: tok}}}
		switch err := e.c.fillOwners(ctx, r, li, nil); {
		case deploy.NoPerm(err):
			// The owner record lies outside the election's keys: a user
			// granted exactly those reads the leader without its Owner.
			e.c.dep.OwnersRefused(err)
		case err != nil:
			return LeaderInfo{}, 0, err
		default:
			info.Owner = li.Holders[0].Owner
		}
	}
	return info, max(info.TTL, 0), nil
}

// Observing: how long an observer waits when nothing in Redis expires by
// itself (nobody leads), in case a notification was lost without its
// connection; how long at most between two reads (a pub/sub connection
// does not say when it breaks: without a read an observer would learn
// that it is blind only when the leader's lease runs out, a whole TTL);
// and how it backs off while Redis cannot be read.
const (
	observeIdle     = 30 * time.Second
	observeBeat     = 2 * time.Second
	observeRetry    = 100 * time.Millisecond
	observeRetryMax = 2 * time.Second
	observeLate     = 5 * time.Millisecond // read a little after an expiry
)

// Observe follows the election: the returned channel receives who leads
// now, then every change in order — a new leader, a new value
// (Proclaim), nobody leading (a zero Term: resigned, expired,
// force-unlocked) — until ctx ends or the Client closes, when it is
// closed. Changes that come faster than the receiver reads may be
// coalesced, but the latest state is always delivered. Between two
// leaders an observer may see nobody lead for a moment: a resigning
// leader hands the lock to the next candidate at once, but that
// candidate's value is recorded by its own Campaign when it learns of it
// (a round trip later), and until then nobody counts as leader.
//
// Observe is told of changes on the election's channel, and reads again
// when the leader's lease would expire, so a leader that dies without a
// word is reported gone as soon as its lease runs out; besides, it reads
// the election every 2 s (one read; every second or so when the server
// refuses pub/sub), because a pub/sub connection does not say when it
// breaks. While Redis cannot be read — noticed within about 2 s — Observe
// sends the last state once with Err set (the observer is blind: it
// cannot tell a change), logs the error and tries again; once it can read again it sends the state, Err nil. The channel is closed at once when ctx is nil or done, the
// Election nil or unusable on this Client (WithoutScripts, a quorum), or
// the Client closed.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if e == nil || e.c == nil || checkCall(ctx, e.c, e.k.Name) != nil || e.c.caps.Supports("Election") != nil {
		close(out)
		return out
	}
	c := e.c
	if !c.holds.Background(func() { e.observe(ctx, out) }) {
		close(out)
	}
	return out
}

// observe is Observe's goroutine: it sends the first state, then each
// change, each read once woken (a notification, a pub/sub reconnect) or
// when the state it read may change by itself.
func (e *Election) observe(ctx context.Context, out chan<- LeaderInfo) {
	defer close(out)
	c := e.c
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.life, cancel)
	defer stop()
	var last *LeaderInfo
	retry := backoff.New(observeRetry, observeRetryMax)
	blind := false // the last thing sent said Redis could not be read
	check := func(ctx context.Context, _ string) (bool, time.Duration, error) {
		info, expires, err := e.read(ctx, last)
		if err != nil {
			if ctx.Err() != nil {
				return true, 0, nil
			}
			pause := retry.Next()
			c.tel.Log.Warn("dlock: observing an election: reading its leader failed", "election", e.k.Name, "err", err)
			if !blind {
				var stale LeaderInfo
				if last != nil {
					stale = *last
				}
				stale.Err = err
				select {
				case out <- stale:
					blind = true
				case <-ctx.Done():
					return true, 0, nil
				}
			}
			return false, pause, nil
		}
		retry.Reset()
		if blind || last == nil || info.Term != last.Term || info.Value != last.Value {
			blind = false
			select {
			case out <- info:
			case <-ctx.Done():
				return true, 0, nil
			}
			last = &info
		}
		if expires > 0 {
			return false, min(expires+observeLate, observeBeat), nil
		}
		return false, min(observeIdle, observeBeat), nil
	}
	_ = c.acq.WaitLoop(ctx, e.k.Name, e.k.Channel, "", nil, 0, check)
}
