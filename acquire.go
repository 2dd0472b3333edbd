package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/acquisition"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/deadlock"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
)

// request is one Lock or TryLock of a primitive, stated by the primitive:
// its keys, its protocol, its acquire script. Client.acquire does the rest
// for all of them: checks, options, re-entry, the attempt, the wait, the
// lease and its watchdog registration.
type request struct {
	// Request is what the acquire path below the root reads of it, by
	// pointer: keys, protocol, the attempt's script call.
	backend.Request
	handle []LockOption     // the handle's defaults
	takes  backend.LockOpts // the options it takes beyond TTL and lease
	// handOff: a renewed lease's waiter asks to be handed the lock by the
	// release itself (a Mutex, a FairMutex; see lib_mutex.lua).
	handOff bool
	// once: a win whose lease has ended before the acquire returns it is
	// refused with an error, not acquired again (a Campaign: its doc; see
	// valid)
	once bool
	// check, if set, checks the request's own input, after the checks
	// every request has.
	check func() error
	// token, if set, returns the owner token to acquire with (a writer
	// reading inside its write hold keeps its token), or refuses.
	token func(ctx context.Context) (string, error)
	// labelled: call writes the label (WithLabel) into the hold its
	// attempt takes, so only a hold handed over by a release (which does
	// not know it) needs label.lua after.
	labelled bool
}

// acquire runs a request: a TryLock (wait false) or a Lock.
func (c *Client) acquire(ctx context.Context, r *request, wait bool, opts []LockOption) (*Lease, error) {
	if err := checkCall(ctx, c, r.K.Name); err != nil {
		return nil, err
	}
	if err := c.caps.Supports(r.What); err != nil {
		return nil, err
	}
	if r.check != nil {
		if err := r.check(); err != nil {
			return nil, err
		}
	}
	cfg := withOpts(defaultLock, r.handle, opts)
	if err := validLock(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Refuse(r.What, r.takes); err != nil {
		return nil, err
	}
	if _, ok := r.Ops.(backend.Reentrant); ok {
		if outer := leaseFrom(ctx, c, r.K.Lock, side(r.Side)); outer != nil {
			if err := c.caps.Supports("re-entry"); err != nil {
				return nil, err
			}
			return reenter(ctx, outer)
		}
	}
	return valid(ctx, r.K.Name, wait && !r.once, func() (*Lease, error) { return c.acquireOnce(ctx, r, wait, cfg) })
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
	handOff := r.handOff && cfg.Renew && c.caps.HandOff
	var handOffTTL time.Duration // 0: none
	if handOff {
		handOffTTL = cfg.TTL
	}
	member := c.member(token, r.Need, handOffTTL)
	a := c.acq.New()
	a.What, a.Name, a.Channel, a.Token, a.HandOff = r.What, r.K.Name, r.K.Channel, token, handOff
	a.Spec = backend.AttemptSpec{Request: &r.Request, Token: token, Member: member, Cfg: cfg}
	p, attempt := c.be.Attempt(&a.Spec)
	a.Attempt = attempt
	a.One(acquisition.Part{Request: &r.Request, Held: p, Cfg: cfg})
	if wait {
		a.Detect = c.detectorFor(ctx, r.What, token, func() []deadlock.Lock { return lockFor(r) }, r.Need, cfg)
	}
	if r.Queue && c.caps.Directed {
		a.Channel = c.waitOn // one per Client, made once
		if k := r.K; k.Wake != c.wake {
			a.Channel = c.wakeTo(k).Base + c.id // a lock's own (sharded, or an Election's)
		}
		a.KeepAlive = cfg.QueueTTL / 3
		a.LeaveSpec = true // a.Spec.Leave(member)
	}
	hs, err := a.Run(ctx, wait)
	if err != nil {
		return nil, c.busy(ctx, kindOfWhat(r.What), r.K.Name, token, err)
	}
	if cfg.Label != "" && (!r.labelled || hs[0].Handed()) { // after a grant that did not write it
		c.label(ctx, r.K, token, cfg.Label)
	}
	return &Lease{of: hs[0], end: hs[0].FirstEnd()}, nil
}

// leasesOf makes the first leases of holds just taken.
func leasesOf(hs []*hold.Hold) []*Lease {
	ls := make([]*Lease, len(hs))
	for i, h := range hs {
		ls[i] = &Lease{of: h, end: h.FirstEnd()}
	}
	return ls
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

// leaseFrom returns the lease that ctx carries for the lock's side, if
// any: always a single lease (a set carries its parts).
func leaseFrom(ctx context.Context, c *Client, lock string, s side) *Lease {
	if ctx.Value(carrying{}) == nil {
		return nil
	}
	l, _ := ctx.Value(leaseKey{c.holds, lock, s}).(*Lease)
	return l
}

// reenter adds a lease to the hold that outer belongs to: the hold count
// goes up by one in Redis and the lease gets the hold's token and fence.
func reenter(ctx context.Context, outer *Lease) (*Lease, error) {
	h := outer.of.First()
	r := &struct {
		Lease
		end hold.End
	}{} // one allocation
	r.Lease = Lease{of: h, end: &r.end}
	if err := h.Reenter(ctx, outer.end, r.Lease.end); err != nil {
		return nil, err
	}
	return &r.Lease, nil
}

// newToken returns an owner token: 32 hex digits, the Client's id (64
// random bits, so an inspector can tell whose hold it is) then 64 random
// bits of its own, from crypto/rand.
func (c *Client) newToken() string {
	var raw [8]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand, Go 1.24+)
	var hx [2 * len(raw)]byte
	hex.Encode(hx[:], raw[:])
	var b strings.Builder // one allocation: the token itself
	b.Grow(len(c.id) + len(hx))
	b.WriteString(c.id)
	b.Write(hx[:])
	return b.String()
}

// randomHex returns n random bytes from crypto/rand, in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}

// Grants that come back too late. A grant whose reply comes after its
// lease's validity has passed (start+TTL less the drift margin: the
// server stalled longer than the TTL, say) proves nothing any more: the
// lock may have expired on the server and gone to another owner. So an
// acquire never returns such a lease (its Err would say it is lost at
// once; dlock run would start CMD and stop it at once): it releases what
// was taken (the lock may still be held in Redis, its TTL counted from
// when the grant ran), and a Lock acquires again, with a new token, within
// its ctx, while a TryLock — and a Campaign, as its doc says — fails with
// ErrNotObtained (and ErrLeaseLost: won, but lost before the reply
// came). A LockAll that takes its locks one by one does the same when a
// part's lease ended while it waited for the next (a fixed lease shorter
// than that wait). The check is the lease's own (Err, its local
// deadline: expireIfLate), the one Campaign makes after recording its
// value, and the error says it as Campaign does (wonButLost).

// valid runs take — one acquisition, with a token of its own — until it
// returns a lease that is still valid, or fails (see above); with again
// false (a TryLock, a Campaign) it runs it once. Tries again come after a
// pause that doubles from retryFirst up to retryMax (a server that stays
// slow is not hammered), and not at all for a lease that no reply can
// find valid (a TTL within the drift margin: 2 ms or less by default).
func valid(ctx context.Context, name string, again bool, take func() (*Lease, error)) (*Lease, error) {
	pause := backoff.New(retryFirst, retryMax)
	for {
		l, err := take()
		if err != nil {
			return nil, err
		}
		lost := l.Err()
		if lost == nil {
			return l, nil
		}
		// A new token for the next try: a release that hands the lock on
		// leaves this one in the dead set, where it could take nothing.
		releaseAll(ctx, []*Lease{l})
		if !again || slices.ContainsFunc(l.Parts(), func(p *Lease) bool { return p.of.First().NeverValid() }) {
			return nil, wonButLost(name, lost)
		}
		l.of.First().Keeper().Tel().Log.Info("dlock: a lease ended before its acquire could return it; acquiring again", "lock", name, "err", lost)
		timer := time.NewTimer(pause.Next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, errs.WaitEnded(name, ctx.Err())
		case <-timer.C:
		}
	}
}

// Tries again of an acquire whose lease ended before it returned (valid).
const (
	retryFirst = time.Millisecond
	retryMax   = 256 * time.Millisecond
)

// wonButLost is the error of an acquire that won a lock whose lease had
// ended before the acquire could return it.
func wonButLost(name string, err error) error {
	return fmt.Errorf("%w: %q: won, but %w", ErrNotObtained, name, err)
}

// releaseAll unlocks leases after a failed LockAll, within undoGrace
// when ctx has ended; a release that cannot be made then goes on in the
// background (see hold.Hold.Unlock).
func releaseAll(ctx context.Context, leases []*Lease) {
	ctx, cancel := hold.Graced(ctx)
	defer cancel()
	for i := len(leases) - 1; i >= 0; i-- {
		_ = leases[i].Unlock(ctx)
	}
}
