package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Extend to far more than the TTL while a watchdog renewal is in flight:
// the renewal must not shorten the lease again on the server, or the key
// expires while the lease still reports itself held.
func TestExtendRacingRenewalNeverShortens(t *testing.T) {
	ctx := context.Background()
	holder, other := client(t), client(t)
	const n = 300
	base := lockName(t)
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		leases[i] = mustLock(t, holder.Mutex(fmt.Sprintf("%s-%d", base, i)), ctx, dlock.WithTTL(60*time.Millisecond))
	}
	// Extend them spread over a few renewal periods, so that many meet a
	// renewal in flight.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				_ = leases[i].Extend(ctx, 10*time.Second) // a lost lease may fail: checked below
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // three times the old TTL: a shortened key is gone
	twice := 0
	for i, l := range leases {
		if l.Err() != nil {
			continue // lost and told: allowed
		}
		if o, err := other.Mutex(l.Name()).TryLock(ctx); err == nil {
			twice++
			if twice <= 3 {
				t.Errorf("lease %d still reports itself held, but another owner got the lock (fence %d after %d)", i, o.Fence(), l.Fence())
			}
			_ = o.Unlock(ctx)
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatal(err)
		}
	}
	if twice > 0 {
		t.Fatalf("%d of %d locks granted twice after Extend", twice, n)
	}
	for _, l := range leases {
		_ = l.Unlock(ctx)
	}
}

// The same race on the primitives whose holds have their own expiry in
// Redis (semaphore permits, read holds).
func TestExtendRacingRenewalOtherKinds(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	const n = 100
	base := lockName(t)
	ttl := dlock.WithTTL(60 * time.Millisecond)
	type held struct {
		l     *dlock.Lease
		probe func() error // nil when the hold is still there
	}
	var hs []held
	for i := range n {
		s := c.Semaphore(fmt.Sprintf("%s-s%d", base, i), 1)
		hs = append(hs, held{mustAcquire(t, s, 1, ttl), func() error {
			l, err := s.TryAcquire(ctx, 1)
			if err == nil {
				_ = l.Unlock(ctx)
				return errors.New("a permit was free")
			}
			return nil
		}})
		rw := c.RWMutex(fmt.Sprintf("%s-r%d", base, i))
		hs = append(hs, held{mustLock(t, rw.RLocker(), ctx, ttl), func() error {
			l, err := rw.TryLock(ctx)
			if err == nil {
				_ = l.Unlock(ctx)
				return errors.New("a writer got in")
			}
			return nil
		}})
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(hs); i += 4 {
				_ = hs[i].l.Extend(ctx, 10*time.Second)
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	bad := 0
	for _, h := range hs {
		if h.l.Err() != nil {
			continue
		}
		if err := h.probe(); err != nil {
			bad++
			if bad <= 3 {
				t.Errorf("%s: still reports itself held, but %v", h.l.Name(), err)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d holds shortened by a renewal after Extend", bad, len(hs))
	}
	for _, h := range hs {
		_ = h.l.Unlock(ctx)
	}
}

// Every Lease method works on every kind of lease, held and ended: the
// lease of each primitive, a re-entered lease, a LockAll set, a quorum
// lease and a script-free one.
func TestLeaseMethodsOnEveryKind(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	_, nodes := quorumNodes(t, 3)
	q := quorumClient(t, nodes)
	plain := client(t, dlock.WithoutScripts())
	type maker struct {
		name string
		take func(name string) (*dlock.Lease, error)
	}
	makers := []maker{
		{"reentered", func(n string) (*dlock.Lease, error) {
			outer, err := c.Mutex(n).Lock(ctx)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = outer.Unlock(ctx) })
			return c.Mutex(n).Lock(outer.Context(ctx))
		}},
		{"LockAll", func(n string) (*dlock.Lease, error) {
			return dlock.LockAll(ctx, c.Mutex(n+"-a"), c.RWMutex(n+"-b").RLocker(), c.FairMutex(n+"-c"))
		}},
		{"quorum", func(n string) (*dlock.Lease, error) { return q.Mutex(n).Lock(ctx) }},
		{"WithoutScripts", func(n string) (*dlock.Lease, error) { return plain.Mutex(n).Lock(ctx) }},
	}
	for _, k := range allKinds {
		makers = append(makers, maker{k.name, func(n string) (*dlock.Lease, error) { return k.lock(c, n, ctx) }})
	}
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			l, err := m.take(lockName(t))
			if err != nil {
				t.Fatal(err)
			}
			if l.Name() == "" || len(l.Token()) != 32 || l.Fence() < 1 || len(l.Parts()) < 1 {
				t.Fatalf("Name %q Token %q Fence %d Parts %d", l.Name(), l.Token(), l.Fence(), len(l.Parts()))
			}
			lctx := l.Context(ctx)
			if l.Err() != nil || lctx.Err() != nil {
				t.Fatalf("held lease: Err %v, Context %v", l.Err(), lctx.Err())
			}
			select {
			case <-l.Done():
				t.Fatal("Done closed while held")
			default:
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if d, err := l.TTL(ctx); err != nil || d <= 30*time.Second || d > time.Minute {
				t.Fatalf("TTL after Extend(1m) = %v, %v", d, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			<-l.Done()
			if !errors.Is(l.Err(), dlock.ErrUnlocked) || !errors.Is(context.Cause(lctx), dlock.ErrUnlocked) {
				t.Fatalf("after Unlock: Err %v, Context cause %v", l.Err(), context.Cause(lctx))
			}
			if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("second Unlock: %v", err)
			}
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Extend after Unlock: %v", err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("TTL after Unlock: %v", err)
			}
			if l.Token() == "" || l.Name() == "" {
				t.Fatal("Token or Name gone after Unlock")
			}
		})
	}
}
