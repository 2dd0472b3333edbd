package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/redis/go-redis/v9"
)

// The safety scene: holder A takes the demo lock with a fixed lease that
// is shorter than its job. Its lease ends in the middle of the job, and A
// is told so (Done closes); holder B, waiting meanwhile, gets the lock
// with a higher fence and writes to a fenced resource. A then writes as a
// holder that ignored Done (a paused process, say) would: the resource
// rejects its lower fence.
const (
	sceneLease = 300 * time.Millisecond // A's fixed lease (WithLease)
	sceneJob   = 600 * time.Millisecond // how long A's job takes
)

// The protected resource is a key written through fence/redisfence's
// Guard: Redis keeps the highest fence it has accepted for the resource
// and refuses writes that carry a lower one (a record of its own, in the
// key's slot: the key carries the resource's hash tag).

// fencedGuard is the demo's Guard, and dataKey the resource's key.
func fencedGuard(rdb redis.UniversalClient, prefix string) *redisfence.Guard {
	return redisfence.New(rdb, redisfence.WithPrefix(prefix+":fenced"))
}

func dataKey(prefix string) string { return prefix + ":{" + resourceKey + "}" }

// safetyResult is what the scene observed.
type safetyResult struct {
	fenceA, fenceB int64
	lostAt         time.Time // when A's Done closed; zero if it never did
	lostErr        error     // A's Err then
	takenAt        time.Time // when B got the lock
	errAtTakeover  error     // A's Err when B got the lock: must not be nil
	acceptedB      bool      // the resource took B's write
	rejectedA      bool      // the resource refused A's late write
}

// problems lists what the scene should have shown and did not.
func (r safetyResult) problems() []string {
	var p []string
	if r.lostAt.IsZero() {
		p = append(p, "holder A was never told that its lease ended")
	} else if !errors.Is(r.lostErr, dlock.ErrLeaseLost) {
		p = append(p, fmt.Sprintf("holder A's lease ended with %v, want dlock.ErrLeaseLost", r.lostErr))
	}
	if !r.takenAt.IsZero() && r.errAtTakeover == nil {
		p = append(p, "holder B got the lock before holder A was told it lost it")
	}
	if r.fenceB <= r.fenceA {
		p = append(p, fmt.Sprintf("fence %d of the next owner is not above %d", r.fenceB, r.fenceA))
	}
	if !r.acceptedB {
		p = append(p, "the resource refused the current owner's write")
	}
	if !r.rejectedA {
		p = append(p, "the resource accepted the stale owner's write")
	}
	return p
}

// safetyScene plays the scene on rdb and reports each step to sh.
func safetyScene(ctx context.Context, rdb redis.UniversalClient, prefix string, sh *show) (safetyResult, error) {
	var r safetyResult
	// Two clients, as two processes would have.
	ca, err := dlock.New(rdb, dlock.WithPrefix(prefix))
	if err != nil {
		return r, err
	}
	defer ca.Close()
	cb, err := dlock.New(rdb, dlock.WithPrefix(prefix))
	if err != nil {
		return r, err
	}
	defer cb.Close()
	guard := fencedGuard(rdb, prefix)

	la, err := ca.Mutex(demoLock).Lock(ctx, dlock.WithLease(sceneLease))
	if err != nil {
		return r, fmt.Errorf("holder A: %w", err)
	}
	defer unlock(la) // ErrNotHeld by then: the lease is gone
	jobEnds := time.NewTimer(sceneJob)
	defer jobEnds.Stop()
	r.fenceA = la.Fence()
	sh.event(time.Now(), "holder A", lockEvent("acquired", r.fenceA,
		fmt.Sprintf("fixed lease %s (WithLease), its job takes %s", formatMillis(sceneLease), formatMillis(sceneJob))))

	bDone := make(chan error, 1)
	go func() { bDone <- holderB(ctx, cb, guard, prefix, sh, la, &r) }()

	// A's job. It watches Done, and so learns when its lease ends.
	jobDone := false
	select {
	case <-la.Done():
		r.lostAt, r.lostErr = time.Now(), la.Err()
		sh.event(r.lostAt, "holder A", lockEvent("LOST", r.fenceA, fmt.Sprint(r.lostErr)))
	case <-jobEnds.C:
		jobDone = true
	case <-ctx.Done():
	}
	// B acts in the meantime; A writes only after B's write, so that the
	// scene always plays in the same order.
	if err := <-bDone; err != nil {
		return r, err
	}
	if !jobDone {
		if err := sleepUntil(ctx, jobEnds); err != nil {
			return r, err
		}
	}
	ok, seen, err := writeFenced(ctx, guard, prefix, la, "A")
	if err != nil {
		return r, err
	}
	r.rejectedA = !ok
	what := "accepted by the resource: a stale write got through"
	if !ok {
		what = fmt.Sprintf("rejected: the resource has seen fence %d (A wrote anyway, as a paused process would)", seen)
	}
	sh.event(time.Now(), "holder A", lockEvent("write", r.fenceA, what))
	return r, nil
}

// holderB waits for the lock, writes to the resource with its fence and
// releases the lock. It fills in its part of r, including what A's lease
// la said at the moment B got the lock.
func holderB(ctx context.Context, c *dlock.Client, guard *redisfence.Guard, prefix string, sh *show,
	la *dlock.Lease, r *safetyResult) error {
	asked := time.Now()
	lb, err := c.Mutex(demoLock).Lock(ctx, dlock.WithTTL(demoTTL))
	if err != nil {
		return fmt.Errorf("holder B: %w", err)
	}
	// Err checks A's local deadline itself, so this does not depend on
	// when the watchdog goroutine gets to close Done.
	r.errAtTakeover = la.Err()
	r.takenAt, r.fenceB = time.Now(), lb.Fence()
	sh.event(r.takenAt, "holder B", lockEvent("acquired", r.fenceB, "waited "+formatMillis(r.takenAt.Sub(asked))))
	ok, seen, err := writeFenced(ctx, guard, prefix, lb, "B")
	if err != nil {
		_ = unlock(lb)
		return err
	}
	r.acceptedB = ok
	what := "accepted by the resource"
	if !ok {
		what = fmt.Sprintf("rejected: the resource has seen fence %d", seen)
	}
	sh.event(time.Now(), "holder B", lockEvent("write", r.fenceB, what))
	left := time.Now()
	if err := unlock(lb); err != nil {
		return fmt.Errorf("holder B: %w", err)
	}
	sh.event(left, "holder B", lockEvent("released", r.fenceB, "held "+formatMillis(left.Sub(r.takenAt))))
	return nil
}

// writeFenced writes value to the fenced resource with t's fence. It
// returns whether the write was accepted and, if not, the fence the
// resource had accepted.
func writeFenced(ctx context.Context, guard *redisfence.Guard, prefix string, t fence.Token, value string) (bool, int64, error) {
	err := guard.Set(ctx, t, resourceKey, dataKey(prefix), value, 0)
	if errors.Is(err, fence.ErrStale) {
		seen, ferr := guard.Fence(ctx, resourceKey)
		return false, seen, ferr
	}
	if err != nil {
		return false, 0, fmt.Errorf("fenced write: %w", err)
	}
	return true, 0, nil
}

// sleepUntil waits for t to fire or for ctx to end.
func sleepUntil(ctx context.Context, t *time.Timer) error {
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
