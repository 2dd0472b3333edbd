package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestWithoutScripts(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t, dlock.WithoutScripts())
	name := lockName(t)
	m := c.Mutex(name)
	l := mustLock(t, m, ctx)
	for _, call := range rec.take() {
		for _, cmd := range call {
			if cmd == "eval" || cmd == "evalsha" {
				t.Fatalf("a script was sent without scripts: %v", call)
			}
		}
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held plain lock: %v", err)
	}
	if _, err := m.Lock(l.Context(ctx)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("re-entry without scripts: %v, want ErrUnsupported", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	unlock(t, l)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
	l2 := mustLock(t, m, ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
	}
	unlock(t, l2)
	for _, call := range rec.take() {
		for _, cmd := range call {
			if cmd == "eval" || cmd == "evalsha" {
				t.Fatalf("a script was sent without scripts: %v", call)
			}
		}
	}

	// What needs scripts says so.
	for what, err := range map[string]error{
		"FairMutex": func() error { _, err := c.FairMutex(name).TryLock(ctx); return err }(),
		"RWMutex":   func() error { _, err := c.RWMutex(name).TryRLock(ctx); return err }(),
		"Semaphore": func() error { _, err := c.Semaphore(name, 1).TryAcquire(ctx, 1); return err }(),
		"Latch":     func() error { _, err := c.Latch(name).Count(ctx); return err }(),
	} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s without scripts: %v, want ErrUnsupported", what, err)
		}
	}
	if _, err := dlock.New(newRedis(t, srv), dlock.WithoutScripts(), dlock.WithReplicaSync(1, time.Second)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("WithoutScripts with WithReplicaSync: %v", err)
	}
}

func TestWithoutScriptsOwnershipAndExpiry(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a := client(t, dlock.WithoutScripts())
	b := client(t, dlock.WithoutScripts())
	stale := mustLock(t, a.Mutex(name), ctx, dlock.WithLease(80*time.Millisecond))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cur := mustLock(t, b.Mutex(name), wctx) // after the fixed lease runs out
	if !errors.Is(stale.Err(), dlock.ErrLeaseLost) {
		t.Fatalf("expired lease: %v", stale.Err())
	}
	if err := stale.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("stale Unlock: %v", err)
	}
	if _, err := a.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the stale owner freed the new owner's lock: %v", err)
	}
	// The watchdog renews a plain lease too.
	const ttl = renewTTL
	other := mustLock(t, b.Mutex(name+"-renewed"), ctx, dlock.WithTTL(ttl))
	time.Sleep(4 * ttl)
	if err := other.Err(); err != nil {
		t.Fatalf("renewed plain lease lost: %v", err)
	}
	unlock(t, other)
	unlock(t, cur)
}

func TestWithoutScriptsExclusion(t *testing.T) {
	name := lockName(t)
	checkLostUpdates(t, newRedis(t, srv), name+":counter", 8, 8, func(int) dlock.Locker {
		return client(t, dlock.WithoutScripts()).Mutex(name, dlock.WithTTL(2*time.Second))
	})
}

// A Client made WithoutScripts writes no owner record (it would take a
// script call); inspection still shows its hold, without an Owner.
func TestWithoutScriptsNoOwnerRecord(t *testing.T) {
	ctx := context.Background()
	c, _ := countedClient(t, dlock.WithoutScripts())
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx)
	defer unlock(t, l)
	info, err := client(t).Inspect(ctx, dlock.KindMutex, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].Token != l.Token() || info.Holders[0].Owner != nil {
		t.Fatalf("Inspect of a script-free hold: %+v; want its token, no Owner", info.Holders)
	}
}
