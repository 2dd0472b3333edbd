package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
)

// What "dlock run" holds while CMD runs: the lock NAME (a Mutex's lease),
// or with --value the leadership of the election NAME. The loop that
// supervises CMD (runChild) sees only the holding interface, so a lost
// leadership stops CMD exactly as a lost lock does: SIGTERM to its
// process group, SIGKILL after --grace.

// holding is what run holds while CMD runs.
type holding interface {
	// Done is closed when the hold ends: released, or lost as soon as it
	// may have been.
	Done() <-chan struct{}
	// Err is nil while the hold lasts; afterwards it says why it ended.
	Err() error
	// Fence is the fencing token handed to CMD: the lease's fence, or
	// the leader's term.
	Fence() int64
	// Release gives the hold back (Unlock, Resign), bounded by ctx. It
	// returns an error matching dlock.ErrNotHeld when the hold had
	// already ended.
	Release(ctx context.Context) error
	// TTL reads how long the hold has left on the server, bounded by
	// ctx; an error when it is no longer held or cannot be read.
	TTL(ctx context.Context) (time.Duration, error)
}

// leaseHold is a Mutex's lease as a holding.
type leaseHold struct{ *dlock.Lease }

// Release unlocks the lease.
func (h leaseHold) Release(ctx context.Context) error { return h.Unlock(ctx) }

// leaderHold is a leadership as a holding: its term is its fence.
type leaderHold struct {
	*dlock.Leadership
	e *dlock.Election
}

// TTL reads the election: the leader's TTL left while it is this
// leadership's term.
func (h leaderHold) TTL(ctx context.Context) (time.Duration, error) {
	l, err := h.e.Leader(ctx)
	switch {
	case err != nil:
		return 0, err
	case l.Term != h.Term():
		return 0, dlock.ErrNotHeld
	}
	return l.TTL, nil
}

// Fence returns the leader's term, the election's fencing token.
func (h leaderHold) Fence() int64 { return h.Term() }

// Release resigns: the next candidate leads, and observers are told.
func (h leaderHold) Release(ctx context.Context) error { return h.Resign(ctx) }

// release gives h back within unlockTimeout, which must run even after
// a Ctrl-C.
func release(h holding) error {
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	return h.Release(ctx)
}

// what names what run takes, for messages: `lock "x"` or `election "x"`.
func (c runConfig) what() string {
	if c.elect {
		return "election " + strconv.Quote(c.name)
	}
	switch {
	case c.shared:
		return "the read side of RWMutex " + strconv.Quote(c.name)
	case c.exclusive:
		return "the write side of RWMutex " + strconv.Quote(c.name)
	case c.permits > 0:
		return fmt.Sprintf("a permit of semaphore %q (%d)", c.name, c.permits)
	}
	return "lock " + strconv.Quote(c.name)
}

// heldLine is what run without CMD prints on stdout once it holds the
// lock: the name (quoted as quoteArgs does: a space, a quote...), its fence (a
// leader's term) and the lease's TTL, as in "nightly-report fence=42
// ttl=30s".
func (c runConfig) heldLine(h holding) string {
	return fmt.Sprintf("%s fence=%d ttl=%v", quoteArgs([]string{c.name}), h.Fence(), c.ttl)
}

// heldNote says what run holds, once it holds it.
func (c runConfig) heldNote(h holding) string {
	if c.elect {
		return fmt.Sprintf("leading election %q, term %d, value %q", c.name, h.Fence(), c.value)
	}
	return fmt.Sprintf("holding %s, fence %d", c.what(), h.Fence())
}

// take takes what run holds: the lock NAME (see acquire) or, with
// --value, the leadership of the election NAME (see campaign), with the
// TTL of --ttl. Its errors are those of acquire and campaign.
func (c runConfig) take(ctx context.Context, client *dlock.Client, r *reporter) (holding, error) {
	if c.elect {
		e := client.Election(c.name, c.lockOptions()...)
		ld, err := c.campaign(ctx, e, r)
		if err != nil {
			return nil, err
		}
		return leaderHold{ld, e}, nil
	}
	var l dlock.Locker
	switch {
	case c.shared:
		l = client.RWMutex(c.name, c.lockOptions()...).RLocker()
	case c.exclusive:
		l = client.RWMutex(c.name, c.lockOptions()...)
	case c.permits > 0:
		l = permit{client.Semaphore(c.name, c.permits, c.lockOptions()...)}
	default:
		l = client.Mutex(c.name, c.lockOptions()...)
	}
	lease, err := c.acquire(ctx, l, r)
	if err != nil {
		return nil, err
	}
	return leaseHold{lease}, nil
}

// lockOptions are the lock's: --ttl, --label, and with --max-hold the lock's own
// max hold (maxHoldLock).
func (c runConfig) lockOptions() []dlock.LockOption {
	opts := []dlock.LockOption{dlock.WithTTL(c.ttl)}
	if c.label != "" {
		opts = append(opts, dlock.WithLabel(c.label))
	}
	if c.maxHold > 0 {
		opts = append(opts, dlock.WithMaxHold(c.maxHoldLock()))
	}
	return opts
}

// maxHoldMargin is what the lock's max hold leaves, beyond --max-hold and
// --grace, for run to see CMD's group gone and release the lock: the time
// from the lease's start to run's own clock starting (a reply's way back),
// a SIGKILL taking effect, the guard's exit being reaped, and the lease's
// local deadline coming before the server's expiry (the clock drift
// allowance).
const maxHoldMargin = time.Second

// maxHoldLock is the max hold the lock carries in Redis with --max-hold
// D: D + --grace + maxHoldMargin. run stops CMD D after it took the lock
// (SIGTERM), kills its group --grace later, and releases the lock once the
// group is gone — all before the lock's max hold ends, so the lock is
// never free for another run while CMD still runs. The lock's own max
// hold only bounds a run that cannot release it (paused, cut off from
// Redis): the lock is free by then whatever happens to run. Should the
// lease end first all the same, CMD's group is killed at once
// (runChild).
func (c runConfig) maxHoldLock() time.Duration {
	return c.maxHold + c.grace + maxHoldMargin
}

// acquire takes the lock with one try and then, unless -n was given,
// waits for it: until ctx ends, or for --wait at most. A lock that stays
// busy comes back as an error matching dlock.ErrNotObtained (and
// context.DeadlineExceeded when --wait ran out).
func (c runConfig) acquire(ctx context.Context, m dlock.Locker, r *reporter) (*dlock.Lease, error) {
	lease, err := m.TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || ctx.Err() != nil || c.noWait {
		return lease, err
	}
	if !c.wait.set {
		r.tell(true, fmt.Sprintf("%s is held by others; waiting (Ctrl-C gives up)", c.what()), eventWaiting, "wait_ms", nil)
		return m.Lock(ctx)
	}
	r.tell(true, fmt.Sprintf("%s is held by others; waiting up to %v", c.what(), c.wait.d), eventWaiting, "wait_ms", c.wait.d.Milliseconds())
	wctx, cancel := context.WithTimeout(ctx, c.wait.d)
	defer cancel()
	return m.Lock(wctx)
}

// permit is a Semaphore as a Locker of one permit.
type permit struct{ *dlock.Semaphore }

func (p permit) Lock(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
	return p.Acquire(ctx, 1, opts...)
}

func (p permit) TryLock(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
	return p.TryAcquire(ctx, 1, opts...)
}

// campaign waits until run leads the election e, with the value of
// --value: until ctx ends, or for --wait at most. When someone leads
// already it says so first (the read is only for that note: the
// Campaign decides). A Campaign that does not win comes back as an error
// matching dlock.ErrNotObtained (and context.DeadlineExceeded when --wait
// ran out), and leaves nothing of this candidate in Redis.
func (c runConfig) campaign(ctx context.Context, e *dlock.Election, r *reporter) (*dlock.Leadership, error) {
	if l, err := e.Leader(ctx); err == nil {
		until, waitMs := "(Ctrl-C gives up)", any(nil)
		if c.wait.set {
			until, waitMs = "up to "+c.wait.d.String(), c.wait.d.Milliseconds()
		}
		r.tell(true, fmt.Sprintf("election %q is led by value %q, term %d; waiting %s", c.name, l.Value, l.Term, until),
			eventWaiting, "wait_ms", waitMs, "leader_value", l.Value, "leader_term", l.Term)
	}
	if c.wait.set {
		wctx, cancel := context.WithTimeout(ctx, c.wait.d)
		defer cancel()
		return e.Campaign(wctx, c.value)
	}
	return e.Campaign(ctx, c.value)
}

// childEnv is the environment of the command: run's, with DLOCK_NAME and
// DLOCK_FENCE (the lease's fence, or the leader's term) added.
func (c runConfig) childEnv(h holding) []string {
	return append(os.Environ(),
		"DLOCK_NAME="+c.name,
		"DLOCK_FENCE="+strconv.FormatInt(h.Fence(), 10))
}
