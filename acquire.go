package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"
)

// request is one Lock or TryLock of a primitive, stated by the primitive:
// its keys, its protocol, its acquire script. Client.acquire does the rest
// for all of them: checks, options, re-entry, the attempt, the wait, the
// lease and its watchdog registration.
type request struct {
	what   string           // the primitive, for errors: "Mutex", "RWMutex", ...
	k      *protocol.Keys   // its keys
	side   side             // an RWMutex's read or write side: a separate re-entry per side
	p      backend.HoldOps  // its protocol on one deployment with scripts
	handle []LockOption     // the handle's defaults
	takes  backend.LockOpts // the options it takes beyond TTL and lease
	need   int              // permits a semaphore request waits for; 0 for locks
	// queue: a Lock's waiter registers in Redis (lib_queue.lua), renews its
	// place as it waits, runs leave when it gives up, and is told on its
	// Client's channel when its turn comes. Without it (an RWMutex's
	// readers), the waiter listens on the lock's channel.
	queue bool
	leave func(member string) protocol.Call
	// handOff: a renewed lease's waiter asks to be handed the lock by the
	// release itself (a Mutex, a FairMutex; see lib_mutex.lua).
	handOff bool
	// once: a win whose lease has ended before the acquire returns it is
	// refused with an error, not acquired again (a Campaign: its doc; see
	// Client.valid)
	once bool
	// check, if set, checks the request's own input, after the checks
	// every request has.
	check func() error
	// token, if set, returns the owner token to acquire with (a writer
	// reading inside its write hold keeps its token), or refuses.
	token func(ctx context.Context) (string, error)
	// call is the acquire script call of one attempt; member is the
	// waiter's registration for a Lock's attempts (which take or keep a
	// place in the queue), "" for a TryLock's; placed is true when an
	// earlier attempt of the same acquire made a place (it may have one
	// to give up).
	call func(token, member string, placed bool, cfg lockConfig) protocol.Call
}

// acquire runs a request: a TryLock (wait false) or a Lock.
func (c *Client) acquire(ctx context.Context, r *request, wait bool, opts []LockOption) (*Lease, error) {
	if err := checkCall(ctx, c, r.k.Name); err != nil {
		return nil, err
	}
	if err := c.caps.Supports(r.what); err != nil {
		return nil, err
	}
	if r.check != nil {
		if err := r.check(); err != nil {
			return nil, err
		}
	}
	cfg := withOpts(withOpts(defaultLock, r.handle), opts)
	if err := validLock(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Refuse(r.what, r.takes); err != nil {
		return nil, err
	}
	if _, ok := r.p.(backend.Reentrant); ok {
		if outer := leaseFrom(ctx, c, r.k.Lock, r.side); outer != nil {
			if err := c.caps.Supports("re-entry"); err != nil {
				return nil, err
			}
			return reenter(ctx, outer)
		}
	}
	return valid(ctx, r.k.Name, wait && !r.once, func() (*Lease, error) { return c.acquireOnce(ctx, r, wait, cfg) })
}

// acquireOnce is one acquisition of r, with a token of its own.
func (c *Client) acquireOnce(ctx context.Context, r *request, wait bool, cfg lockConfig) (*Lease, error) {
	token := c.newToken()
	if r.token != nil {
		var err error
		if token, err = r.token(ctx); err != nil {
			return nil, err
		}
	}
	member := c.member(token, r.need)
	handOff := r.handOff && cfg.Renew && c.caps.HandOff
	if handOff {
		member = protocol.HandOffMember(member, cfg.TTL)
	}
	a := &acquisition{c: c, what: r.what, name: r.k.Name, channel: r.k.Channel, token: token, handOff: handOff,
		spec: backend.AttemptSpec{K: r.k, What: r.what, Ops: r.p, Need: r.need, Queue: r.queue, Call: r.call, Leave: r.leave,
			Token: token, Member: member, Cfg: cfg}}
	p, attempt := c.be.Attempt(&a.spec)
	a.attempt = attempt
	a.one[0] = part{k: r.k, what: r.what, side: r.side, p: p, cfg: cfg}
	a.parts = a.one[:]
	if r.queue && c.caps.Directed {
		a.channel = c.wakeTo(r.k).Base + c.id
		a.keepAlive = cfg.QueueTTL / 3
		a.leave = func() []protocol.Call { return []protocol.Call{r.leave(member)} }
	}
	return a.run(ctx, wait)
}

// Locker is what every lock of this package offers: Mutex, FairMutex, and
// the read and write sides of an RWMutex. LockAll takes any mix of them.
type Locker interface {
	// Lock acquires the lock, waiting until it is free or ctx ends.
	Lock(ctx context.Context, opts ...LockOption) (*Lease, error)
	// TryLock makes one attempt and fails with ErrNotObtained if the lock
	// is held.
	TryLock(ctx context.Context, opts ...LockOption) (*Lease, error)
	// Name is the lock's name.
	Name() string

	// order is the key LockAll sorts by, so that every caller takes the
	// same set of locks in the same order.
	order() string
}

// placeTTL is how long a Lock's attempt keeps the waiter's place in the
// queue: 0 for a TryLock's (member ""), which takes none.
func placeTTL(cfg lockConfig, member string) int64 {
	if member == "" {
		return 0
	}
	return cfg.QueueTTL.Milliseconds()
}

// checkCall validates what every acquire checks first.
func checkCall(ctx context.Context, c *Client, name string) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if c == nil {
		return invalid("nil lock handle")
	}
	if name == "" {
		return invalid("empty lock name")
	}
	if c.closed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return waitEnded(name, err)
	}
	return nil
}

// reenter adds a lease to the hold that outer belongs to: the hold count
// goes up by one in Redis and the lease gets the hold's token and fence.
func reenter(ctx context.Context, outer *Lease) (*Lease, error) {
	h := outer.of.first()
	h.calls.Lock()
	defer h.calls.Unlock()
	if err := outer.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	count, want, epoch := h.count+1, h.ttl, h.epoch
	h.mu.Unlock()
	// A re-entry renews the hold's lease, as the watchdog does: no further
	// than its max hold (WithMaxHold), cut when sent.
	if _, ok := h.cut(want, time.Now()); !ok {
		return nil, h.maxHoldReached()
	}
	var ttl time.Duration
	r, seq, start := h.inOrderAt(ctx, true, func(seq int64, start time.Time) backend.Op {
		ttl, _ = h.cut(want, start)
		ttl = max(ttl, minTTL)
		return h.p.(backend.Reentrant).Reenter(h.token, count, ttl, seq)
	})
	res, err := r.Int64Slice()
	if err != nil {
		// The hold count in Redis may or may not be count now, or may
		// become it when this call lands late: recount sets it right
		// again (in the hold's sequence: this call, if late, changes
		// nothing after it). A re-entry only ever lengthens the lease.
		h.recount()
		return nil, redisErr("lock", h.k.Name, err)
	}
	if len(res) < 1 || res[0] != protocol.ReplyHeld {
		err := lost(reasonGone, h.k.Name, "the lock was no longer held at re-entry")
		h.end(err)
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	l, err := h.newLease()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.mu.Lock()
	h.count = count
	if h.epoch == epoch {
		h.confirmed(start, ttl, seq)
		h.c.wd.reschedule(h)
	}
	h.mu.Unlock()
	if err := l.Err(); err != nil {
		// the reply came after the hold's deadline: the hold is lost
		// (valid, wait.go), and this lease with it
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return l, nil
}

// newToken returns an owner token: 32 hex digits, the Client's id (64
// random bits, so an inspector can tell whose hold it is) then 64 random
// bits of its own, from crypto/rand.
func (c *Client) newToken() string {
	return c.id + randomHex(8)
}

// randomHex returns n random bytes from crypto/rand, in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}
