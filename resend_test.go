package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Commands that go-redis sends twice (a reply lost after the server ran
// the command: the server runs both copies) answer as they ran once. The
// release is TestUnlockSentTwiceReportsDone, a Mutex acquire
// TestAmbiguousAcquireRetriedReportsSuccess, the latch's
// latch_resend_test.go; here the other acquires, Extend and Proclaim.
func TestSentTwiceAnswersAsOnce(t *testing.T) {
	ctx := context.Background()
	acquires := map[string]func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error){
		"Mutex": func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
			return c.Mutex(name).TryLock(ctx, dlock.WithTTL(ttl))
		},
		"FairMutex": func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
			return c.FairMutex(name).TryLock(ctx, dlock.WithTTL(ttl))
		},
		"Semaphore": func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithTTL(ttl))
		},
		"RWMutex.read": func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
			return c.RWMutex(name).TryRLock(ctx, dlock.WithTTL(ttl))
		},
		"RWMutex.write": func(c *dlock.Client, name string, ttl time.Duration) (*dlock.Lease, error) {
			return c.RWMutex(name).TryLock(ctx, dlock.WithTTL(ttl))
		},
	}
	for kind, take := range acquires {
		t.Run("acquire/"+kind, func(t *testing.T) {
			c, d := lateClient(t)
			name := lockName(t)
			warm, err := take(c, name, time.Second) // the scripts loaded
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, warm)
			d.mu.Lock()
			d.twice = true
			d.mu.Unlock()
			d.hold("31000")
			l, err := take(c, name, 31*time.Second)
			sentTwice(t, d)
			if err != nil {
				t.Fatalf("an acquire sent twice: %v; want the lease its first copy took", err)
			}
			unlock(t, l)
			again, err := take(client(t), name, time.Second)
			if err != nil {
				t.Fatalf("after the lease of an acquire sent twice was released: %v; want it free", err)
			}
			unlock(t, again)
		})
		t.Run("Extend/"+kind, func(t *testing.T) {
			c, d := lateClient(t)
			l, err := take(c, lockName(t), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer unlock(t, l)
			d.mu.Lock()
			d.twice = true
			d.mu.Unlock()
			d.hold("41000")
			err = l.Extend(ctx, 41*time.Second)
			sentTwice(t, d)
			if err != nil {
				t.Fatalf("an Extend sent twice: %v", err)
			}
			if left, err := l.TTL(ctx); err != nil || left < 35*time.Second {
				t.Fatalf("after an Extend to 41 s sent twice: %v left (%v)", left, err)
			}
		})
	}
	t.Run("Proclaim", func(t *testing.T) {
		c, d := lateClient(t)
		e := c.Election(lockName(t))
		ld, err := e.Campaign(ctx, "v0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ld.Resign(ctx) }()
		d.mu.Lock()
		d.twice = true
		d.mu.Unlock()
		d.hold("v1")
		err = ld.Proclaim(ctx, "v1")
		sentTwice(t, d)
		if err != nil {
			t.Fatalf("a Proclaim sent twice: %v", err)
		}
		if info, err := client(t).Election(e.Name()).Leader(ctx); err != nil || info.Value != "v1" {
			t.Fatalf("after a Proclaim sent twice the election says %+v, %v", info, err)
		}
	})
}

// sentTwice fails the test unless d sent the command it was to hold
// twice (else the test shows nothing).
func sentTwice(t *testing.T, d *lateDriver) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed {
		t.Fatal("no command matched: nothing was sent twice, the test shows nothing")
	}
	d.twice = false
}
