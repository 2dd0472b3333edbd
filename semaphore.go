package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/kinds"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Semaphore hands out up to a capacity of permits. Each Acquire of n
// permits returns a Lease — renewed by the watchdog, lost-signalled and
// fenced like a lock's — and the permits come back when it is released,
// or on their own when its holder stops renewing them (a crashed holder
// does not leak permits).
//
// The capacity lives in Redis ("<prefix>:{<name>}:sem:permits"). The
// permits given to Client.Semaphore set it only if the semaphore has none
// yet, for as long as anyone holds or waits (an idle semaphore leaves no
// key: its next acquire sets it again); SetPermits sets it for good (it
// never expires) and changes it.
//
// Waiters are served in arrival order, as golang.org/x/sync/semaphore
// serves them: the permits the first waiter asks for are kept for it, and
// a newcomer (TryAcquire too) or a later waiter takes permits only if they
// fit beside those. So a stream of small requests cannot starve a large
// one; a small one may still go before a large one when both fit. A
// release wakes, in order, the waiters that fit and nobody else (each on
// its Client's channel). A waiter renews its place every QueueTTL/3
// (WithQueueTTL, 3 s by default); one that dies is skipped QueueTTL after
// its last renewal at most.
//
// A handle is safe for concurrent use.
type Semaphore struct {
	handle
	permits int
}

// MaxPermits is the largest capacity of a Semaphore, and so the most
// permits one Acquire can ask for: 2^52, below which the server's
// arithmetic on permits (Lua numbers are doubles) stays exact.
const MaxPermits = 1 << 52

// Semaphore returns the handle of the semaphore called name, whose
// capacity is permits unless the semaphore already has one in Redis.
// opts set the handle's defaults (WithTTL, WithLease, WithQueueTTL).
func (c *Client) Semaphore(name string, permits int, opts ...LockOption) *Semaphore {
	return &Semaphore{handle{c, c.keys(protocol.SemaphoreKind, name), opts}, permits}
}

// Acquire takes n permits, waiting until that many are free or ctx ends.
// The wait is woken by releases and capacity increases, and bounded by the
// earliest holder's lease. When ctx ends first it returns an error matching
// ErrNotObtained and ctx.Err() and holds nothing. n must be between 1 and
// the capacity (ErrInvalidArgument otherwise). Other errors: ErrClosed and
// wrapped Redis errors.
//
// A nested Acquire — ctx carries a permit of this semaphore from this
// Client, held (it is, or derives from, that permit's Lease.Context) —
// never waits: it makes one attempt, as TryAcquire, and takes its own
// new permits (its own token and fence, released on their own) if they
// are free for it now; otherwise it returns at once an error matching
// ErrNotObtained that says it was nested. Waiting could wait on itself:
// the outer permits are not given back while the nested Acquire waits,
// and a waiter ahead of it, whose permits are kept for it (arrival
// order), may be waiting for exactly those — which no client can see.
func (s *Semaphore) Acquire(ctx context.Context, n int, opts ...LockOption) (*Lease, error) {
	return s.acquire(ctx, n, true, opts)
}

// TryAcquire takes n permits if that many are free beside those kept for
// the first waiter, in one round trip, and returns an error matching
// ErrNotObtained otherwise.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, opts ...LockOption) (*Lease, error) {
	return s.acquire(ctx, n, false, opts)
}

func (s *Semaphore) acquire(ctx context.Context, n int, wait bool, opts []LockOption) (*Lease, error) {
	if s == nil || s.c == nil {
		return nil, invalid("nil Semaphore")
	}
	c, k := s.c, s.k
	nested := false
	if ctx != nil {
		if outer := leaseFrom(ctx, c, k.Lock, ""); outer != nil && outer.Err() == nil {
			nested, wait = wait, false // see Acquire
		}
	}
	p := kinds.Semaphore{K: k, W: c.wakeTo(k)}
	l, err := c.acquire(ctx, &request{Request: backend.Request{What: "Semaphore", K: k, Ops: p, Need: n, Queue: true, Leave: p.Leave,
		Call: func(token, member string, _ bool, cfg lockConfig) protocol.Call {
			return protocol.SemAcquireArgs{Token: token, TTL: cfg.TTL.Milliseconds(), Permits: n, Capacity: s.permits,
				Member: member, PlaceTTL: placeTTL(cfg, member)}.Call(k)
		}},
		handle: s.opts, takes: backend.OptQueueTTL,
		check: func() error {
			if err := validPermits(k.Name, s.permits); err != nil {
				return err
			}
			if n < 1 || n > MaxPermits {
				return invalid("semaphore %q: %d permits asked for; want 1 to MaxPermits (2^52)", k.Name, n)
			}
			return nil
		}}, wait, opts)
	if nested && errors.Is(err, ErrNotObtained) {
		err = fmt.Errorf("%w; a nested Acquire (its ctx carries a permit of this semaphore) does not wait, which could be a wait on its own permits", err)
	}
	return l, err
}

func (s *Semaphore) check(ctx context.Context) error {
	if err := checkCall(ctx, s.c, s.k.Name); err != nil {
		return err
	}
	if err := s.c.caps.Supports("Semaphore"); err != nil {
		return err
	}
	return validPermits(s.k.Name, s.permits)
}

// SetPermits sets the capacity to n (at least 1), one round trip. Permits
// already held stay held: after lowering the capacity below them, new
// acquires wait until enough are given back. Raising it wakes the
// waiters.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if s == nil {
		return invalid("nil Semaphore")
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := validPermits(s.k.Name, n); err != nil {
		return err
	}
	_, _, err := s.info(ctx, n)
	return err
}

// Permits returns the capacity and how many permits are free now (zero
// or less when the capacity was lowered below what is held), one round
// trip.
func (s *Semaphore) Permits(ctx context.Context) (capacity, free int, err error) {
	if s == nil {
		return 0, 0, invalid("nil Semaphore")
	}
	if err := s.check(ctx); err != nil {
		return 0, 0, err
	}
	capacity, used, err := s.info(ctx, 0)
	return capacity, capacity - used, err
}

func (s *Semaphore) info(ctx context.Context, set int) (capacity, used int, err error) {
	k := s.k
	w := s.c.wakeTo(k)
	res, err := protocol.SemPermitsArgs{Capacity: s.permits, Set: set, Wake: w}.Call(k).Run(ctx, s.c.rdb).Int64Slice()
	if err != nil {
		return 0, 0, redisErr("permits", k.Name, err)
	}
	if len(res) != 2 {
		return 0, 0, redisErr("permits", k.Name, errors.New("unexpected script reply"))
	}
	return int(res[0]), int(res[1]), nil
}

// validPermits checks a capacity.
func validPermits(name string, n int) error {
	if n < 1 || n > MaxPermits {
		return invalid("semaphore %q: capacity %d; want 1 to MaxPermits (2^52)", name, n)
	}
	return nil
}

// semKind is what Inspect, Locks and ForceUnlock know of a Semaphore: its
// capacity and its holders' expiries are read beside the hash (extra 0,
// 1); a waiter waits for some permits.
var semKind = kindSpec{primitive: "Semaphore", keys: protocol.SemaphoreKind, queue: true,
	reads: func(k *protocol.Keys) []driver.Command {
		return []driver.Command{protocol.Keyed("GET", k.Permits), zrange(k.Leases)}
	},
	fill:    semHolders,
	waiters: func(in *inspection) { in.queued("", true) },
	force: func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply {
		w := c.wakeTo(k)
		return protocol.SemForceArgs{Wake: w, ID: rc.id, ReceiptTTL: rc.ttl}.Call(k).Run(ctx, r)
	}}

// semHolders reads each holder's permits ('p:<token>'), fence and expiry,
// and what is free.
func semHolders(in *inspection) bool {
	info := in.info
	info.Capacity, _ = strconv.ParseInt(in.text(0), 10, 64)
	until := in.untilOf(in.extra[1])
	used := int64(0)
	for f, v := range in.fields {
		tok, ok := strings.CutPrefix(f, protocol.FieldPermits)
		if !ok {
			continue
		}
		left, live := until[tok]
		if !live {
			continue // its lease ran out: the scripts drop it (untilOf)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		used += n
		h := Holder{Token: tok, Holds: n, Since: in.msAt(in.fields[protocol.FieldTaken+tok]), TTL: left}
		h.Fence, _ = strconv.ParseInt(in.fields[protocol.FieldFence+tok], 10, 64)
		info.Holders = append(info.Holders, h)
	}
	info.Free = info.Capacity - used
	return true
}
