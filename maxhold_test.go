package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// WithMaxHold: the watchdog renews a lease past its TTL, but not past the
// max hold; then the lease ends as lost, saying why, and the lock is free
// for another owner. Extend is cut to the limit, and refused after it.
func TestMaxHold(t *testing.T) {
	ctx := context.Background()
	a, b := client(t), client(t)
	for _, kind := range []string{"Mutex", "Election"} {
		t.Run(kind, func(t *testing.T) {
			name := lockName(t)
			const ttl, maxHold = 60 * time.Millisecond, 400 * time.Millisecond
			start := time.Now()
			var done <-chan struct{}
			var errOf func() error
			var extend func(time.Duration) error
			switch kind {
			case "Mutex":
				l := mustLock(t, a.Mutex(name, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold)), ctx)
				done, errOf, extend = l.Done(), l.Err, func(d time.Duration) error { return l.Extend(ctx, d) }
			case "Election":
				ld, err := a.Election(name, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold)).Campaign(ctx, "v")
				if err != nil {
					t.Fatal(err)
				}
				done, errOf, extend = ld.Done(), ld.Err, nil
			}
			if extend != nil {
				if err := extend(time.Hour); err != nil { // cut to the max hold
					t.Fatalf("Extend past the max hold: %v", err)
				}
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the lease outlived its max hold by seconds")
			}
			// Renewed past its TTL (several times over): the watchdog did
			// renew it; and not for ever.
			if held := time.Since(start); held < 3*ttl {
				t.Errorf("the lease ended %v after it was taken: before its renewals could carry it past its TTL %v", held, ttl)
			}
			if err := errOf(); !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "max hold") {
				t.Fatalf("Err %v; want ErrLeaseLost saying the max hold ran out", err)
			}
			if extend != nil {
				if err := extend(time.Second); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Extend after the max hold: %v; want ErrNotHeld", err)
				}
			}
			// free in Redis for another owner (at the limit; the holder's
			// deadline kept its drift margin before it)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			switch kind {
			case "Mutex":
				unlock(t, mustLock(t, b.Mutex(name), wctx))
			case "Election":
				ld, err := b.Election(name).Campaign(wctx, "w")
				if err != nil {
					t.Fatal(err)
				}
				_ = ld.Resign(ctx)
			}
		})
	}
	if _, err := a.Mutex(lockName(t), dlock.WithMaxHold(time.Microsecond)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a max hold below 1ms: %v", err)
	}
}

// maxHoldSlack is how far past a hold's max hold the server may keep its
// lock in these tests: the drift margin and the one-way delay of the
// command that set it, on a loaded machine (each defect below overshot by
// hundreds of ms).
const maxHoldSlack = 40 * time.Millisecond

// expiresBy fails the test when the lock key of name lives on the server
// past end (plus maxHoldSlack).
func expiresBy(t *testing.T, name string, end time.Time, what string) {
	t.Helper()
	left := pttl(t, keysOf(name).Lock)
	if over := time.Until(end.Add(maxHoldSlack)); left > over {
		t.Errorf("%s: the lock lives %v more on the server, past the hold's max hold by %v", what, left, left-time.Until(end))
	}
}

// A re-entry shares its hold's max hold (WithMaxHold's doc): it renews
// the lease no further than the limit, so neither the lease nor the lock
// in Redis outlives it — whether the TTL is the max hold (no renewals) or
// shorter (renewed up to it). (Issue 33: a re-entry renewed with the full
// TTL; lock and lease outlived the limit by up to a TTL.)
func TestMaxHoldBindsReentry(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	for _, tc := range []struct {
		name         string
		ttl, maxHold time.Duration
	}{
		{"ttl=maxhold", 900 * time.Millisecond, 900 * time.Millisecond},
		{"ttl<maxhold", 400 * time.Millisecond, 900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			m := c.Mutex(name, dlock.WithTTL(tc.ttl), dlock.WithMaxHold(tc.maxHold))
			l := mustLock(t, m, ctx)
			end := time.Now().Add(tc.maxHold) // after the acquire was sent: no earlier than its max-hold end
			// Re-enter at a third and at two thirds of the max hold: each
			// time, the lock in Redis must end by the max hold.
			for i := 1; i <= 2; i++ {
				time.Sleep(time.Until(end.Add(-tc.maxHold + time.Duration(i)*tc.maxHold/3)))
				inner, err := m.Lock(l.Context(ctx))
				if err != nil {
					t.Fatalf("re-entry %d: %v", i, err)
				}
				expiresBy(t, name, end, fmt.Sprintf("after re-entry %d", i))
				unlock(t, inner)
			}
			<-l.Done()
			if err := l.Err(); !strings.Contains(fmt.Sprint(err), "max hold") {
				t.Fatalf("Err %v; want the max hold ran out", err)
			}
			if after := time.Since(end); after > maxHoldSlack {
				t.Errorf("the lease ended %v past its max hold", after)
			}
			expiresBy(t, name, end, "at the lease's end")
		})
	}
}

// An Extend under a max hold that fails — held back and delivered late,
// dropped, or sent into a paused server with a short ctx — leaves the
// hold as it was: the watchdog goes on renewing it up to the max hold,
// the lease ends there (not at its TTL), and the lock in Redis ends with
// it, whenever the Extend's bytes land. (Issue 33: the hold was marked as
// reaching its limit before the Extend was sent; the lease ended at its
// TTL saying the max hold ran out, and the late Extend kept the
// lock in Redis until the max hold.)
func TestMaxHoldSurvivesAFailedExtend(t *testing.T) {
	const ttl, maxHold = 900 * time.Millisecond, 2400 * time.Millisecond
	ctx := context.Background()
	for _, how := range []string{"late", "dropped", "paused", "stopped"} {
		t.Run(how, func(t *testing.T) {
			name := lockName(t)
			var c *dlock.Client
			var d *lateDriver
			var admin *redis.Client
			key := keysOf(name).Lock
			var s *redistest.Server
			if how == "paused" || how == "stopped" {
				s = redistest.StartT(t, redistest.Options{})
				admin = newRedis(t, s)
				c = newClient(t, newRedis(t, s))
			} else {
				c, d = lateClient(t)
				admin = newRedis(t, srv)
			}
			m := c.Mutex(name, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold))
			warm := mustLock(t, m, ctx) // the server has the scripts
			if err := warm.Extend(ctx, ttl); err != nil {
				t.Fatal(err)
			}
			unlock(t, warm)
			l := mustLock(t, m, ctx)
			end := time.Now().Add(maxHold)
			var err error
			switch how {
			case "late", "dropped":
				d.mu.Lock()
				d.armed = true
				d.pick = func(args []any) bool { // the Extend: its TTL is above the lease's
					return slices.ContainsFunc(args, func(a any) bool { return a == l.Token() }) &&
						slices.ContainsFunc(args, func(a any) bool { ms, ok := a.(int64); return ok && ms > ttl.Milliseconds() })
				}
				d.mu.Unlock()
				err = l.Extend(ctx, time.Hour)
				if how == "late" {
					// after its caller gave up, before the next renewal
					// (at a third of the TTL) could make it stale: it runs
					time.Sleep(time.Until(end.Add(-maxHold + ttl/4)))
					d.deliver(t)
				}
			case "paused":
				if err := admin.Do(ctx, "CLIENT", "PAUSE", (ttl / 2).Milliseconds(), "ALL").Err(); err != nil {
					t.Fatal(err)
				}
				ectx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				err = l.Extend(ectx, time.Hour)
				cancel()
			case "stopped": // SIGSTOP: the Extend's bytes wait in the socket and run at SIGCONT
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				resumed := make(chan struct{})
				time.AfterFunc(ttl/2, func() { _ = s.Resume(); close(resumed) })
				ectx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				err = l.Extend(ectx, time.Hour)
				cancel()
				<-resumed
			}
			if err == nil {
				t.Skip("the Extend was answered") // (the pause did not take hold in time)
			}
			<-l.Done()
			if err := l.Err(); !strings.Contains(fmt.Sprint(err), "max hold") {
				t.Fatalf("Err %v; want the max hold ran out", err)
			}
			if early := time.Until(end); early > maxHoldSlack+maxHold/100 {
				t.Errorf("the lease ended %v before its max hold: the failed Extend stopped its renewals", early)
			}
			left, err := admin.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if left > maxHoldSlack {
				t.Errorf("the lease has ended; the lock lives %v more in Redis", left)
			}
		})
	}
}

// A lease handed over by a release gets its whole max hold, counted from
// when the hand-off reached the waiter (after the release granted it),
// and Redis's lock ends with it. (Issue 33: the max hold counted from
// the waiter's last attempt, up to a keep-alive interval earlier: the
// lease got 283-889 ms of a 1 s max hold, and the hand-off's TTL, counted
// from the release, kept the lock up to 720 ms after the lease ended.)
func TestMaxHoldOfAHandedOverLease(t *testing.T) {
	const maxHold = time.Second
	ctx := context.Background()
	a, b := client(t), client(t)
	name := lockName(t)
	held := mustLock(t, a.Mutex(name), ctx)
	type got struct {
		l   *dlock.Lease
		at  time.Time
		err error
	}
	res := make(chan got, 1)
	go func() {
		l, err := b.Mutex(name, dlock.WithTTL(maxHold), dlock.WithMaxHold(maxHold)).Lock(ctx)
		res <- got{l, time.Now(), err}
	}()
	waitFor(t, "the waiter queued", func() bool {
		n, _ := newRedis(t, srv).ZCard(ctx, keysOf(name).Lock+":queue").Result()
		return n == 1
	})
	// Its attempt was sent before this; its next comes a keep-alive (1 s)
	// later. Half a second on, the hand-off still leaves it more than a
	// quarter of its lease counted from that attempt: it takes it.
	time.Sleep(maxHold / 2)
	unlock(t, held)
	g := <-res
	if g.err != nil {
		t.Fatal(g.err)
	}
	<-g.l.Done()
	if err := g.l.Err(); !strings.Contains(fmt.Sprint(err), "max hold") {
		t.Fatalf("Err %v; want the max hold ran out", err)
	}
	if lasted := time.Since(g.at); lasted < maxHold-maxHold/100-maxHoldSlack {
		t.Errorf("the handed-over lease lasted %v of its %v max hold", lasted, maxHold)
	}
	if left := pttl(t, keysOf(name).Lock); left > maxHoldSlack {
		t.Errorf("the handed-over lease has ended; the lock lives %v more in Redis", left)
	}
}
