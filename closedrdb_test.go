package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// closedTTL is the TTL of the holds of closedRun.
const closedTTL = time.Second

// closedRun holds a Mutex and leads an Election on a Client made by New
// with opts on a go-redis client, which another Client observes; then it
// closes the go-redis client (as a crash does, for Redis) and checks
// what the user would: both holds are told (Done, Err ErrLeaseLost)
// within about a TTL, another Client takes the lock and the observer
// sees the leader go, and a new call fails with an error wrapping
// redis.ErrClosed. It logs each of those that failed and returns how
// many did and how long the holds took to end.
func closedRun(t *testing.T, opts ...dlock.Option) (bad int, took time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failf := func(format string, args ...any) {
		t.Logf(format, args...)
		bad++
	}
	rdb := newRedis(t, srv)
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithTTL(closedTTL))
	ld, err := c.Election(name+"-e", dlock.WithTTL(closedTTL)).Campaign(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	other := client(t)
	obs := other.Election(name + "-e").Observe(ctx)
	if info := next(t, obs); info.Term != ld.Term() {
		t.Fatalf("the observer sees %+v; want the leader's term %d", info, ld.Term())
	}

	closed := time.Now()
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	// Told within about a TTL (the lease's validity runs out on the
	// renewals that fail); a bound well past it for a loaded machine.
	bound := closedTTL + 3*time.Second
	for what, done := range map[string]<-chan struct{}{"the Mutex's lease": l.Done(), "the leadership": ld.Done()} {
		select {
		case <-done:
			took = max(took, time.Since(closed))
		case <-time.After(bound - time.Since(closed)):
			failf("%s still held %v after the go-redis client was closed", what, bound)
			took = max(took, bound)
		}
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		failf("the Mutex's lease ended with %v; want ErrLeaseLost", err)
	}
	if err := ld.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		failf("the leadership ended with %v; want ErrLeaseLost", err)
	}
	// Another Client takes the lock once it has expired in Redis (a
	// drift after the lease was told).
	if !eventually(bound, func() bool {
		l2, err := other.Mutex(name).TryLock(ctx)
		if err == nil {
			_ = l2.Unlock(ctx)
		}
		return err == nil
	}) {
		failf("another Client could not take the lock within %v", bound)
	}
	// The observer sees the leader go.
	deadline := time.After(bound)
watch:
	for {
		select {
		case info := <-obs:
			if info.Err == nil && info.Term != ld.Term() {
				break watch
			}
		case <-deadline:
			failf("the observer still saw the leader %v after the go-redis client was closed", bound)
			break watch
		}
	}
	// A new call fails, saying why.
	_, err = c.Mutex(name + "-new").TryLock(ctx)
	if !errors.Is(err, redis.ErrClosed) {
		failf("TryLock after the go-redis client was closed: %v; want an error wrapping redis.ErrClosed", err)
	}
	return bad, took
}

// eventually polls cond until it holds or within has passed (a condition
// in Redis, which nothing signals).
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Closing the go-redis client a Client was made on ends the Client's use
// of it (issue 45): on dlock's own connections, which the go-redis client
// does not know of, its holds used to be renewed for ever, a leader
// stayed leader and its observers never saw it go.
func TestClosingTheGoRedisClientEndsItsHolds(t *testing.T) {
	onlyGoRedis(t)
	bad, took := closedRun(t)
	t.Logf("holds told %v after the go-redis client was closed", took.Round(time.Millisecond))
	if bad != 0 {
		t.Fatalf("%d checks failed", bad)
	}
}
