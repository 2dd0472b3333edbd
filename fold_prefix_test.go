package dlock_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The fold touches only its own prefix's fence counters. A deployment
// of prefix "app:fence" on the same server keeps its keys in
// app:fence:{...}, names a slot counter of prefix "app" could have: a
// held Mutex (a hash; one named "m", whose key is exactly the name of a
// slot counter of "app", and one that is not), a Semaphore's capacity
// (an integer) and a fence guard's record (an integer). A Client of
// prefix "app", of either layout, must lock at once and leave every one
// of them as it was.
func TestFoldLeavesAnotherPrefixsKeys(t *testing.T) {
	for _, slots := range []bool{false, true} {
		t.Run(map[bool]string{false: "shared", true: "slots"}[slots], func(t *testing.T) {
			ctx := context.Background()
			s := redistest.StartT(t, redistest.Options{})
			admin := newRedis(t, s)
			other := newClient(t, newRedis(t, s), dlock.WithPrefix("app:fence"))
			if keyslot.Tag(keyslot.Of("m")) != "m" {
				t.Fatal("the test wants a lock whose name is a slot's tag")
			}
			var held []*dlock.Lease
			for _, name := range []string{"m", "orders/1"} {
				held = append(held, mustLock(t, other.Mutex(name, dlock.WithTTL(renewTTL)), ctx))
			}
			sem := other.Semaphore("pool", 3)
			sl, err := sem.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, sl)
			guard := redisfence.New(admin, redisfence.WithPrefix("app:fence"))
			g := mustLock(t, other.Mutex("writer"), ctx)
			if err := guard.Set(ctx, g, "orders", "app-data", "v", 0); err != nil {
				t.Fatal(err)
			}
			unlock(t, g)
			before := map[string]string{}
			keys, err := admin.Keys(ctx, "app:fence:{*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				typ, err := admin.Type(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				before[k] = typ
			}
			for _, k := range []string{"app:fence:{m}", "app:fence:{pool}:sem:permits", guard.Record("orders")} {
				if before[k] == "" {
					t.Fatalf("the other prefix's key %s is not there to start with (keys %v)", k, keys)
				}
			}

			c := newClient(t, newRedis(t, s), dlock.WithPrefix("app"), dlock.WithSlotFences(slots))
			// (not "m": with slot fences, its counter is app:fence:{m},
			// the other prefix's lock "m" — the overlap WithPrefix's doc
			// forbids)
			l, err := c.Mutex("a").TryLock(ctx)
			if err != nil {
				t.Fatalf("prefix app: TryLock beside prefix app:fence's keys: %v", err)
			}
			unlock(t, l)
			for k, typ := range before {
				if got, err := admin.Type(ctx, k).Result(); err != nil || got != typ {
					t.Errorf("prefix app:fence's key %s: type %s before the fold of prefix app, %s (%v) after", k, typ, got, err)
				}
			}
			if n, _, err := sem.Permits(ctx); err != nil || n != 3 {
				t.Errorf("prefix app:fence's Semaphore: %d permits (%v), want 3", n, err)
			}
			if f, err := guard.Fence(ctx, "orders"); err != nil || f == 0 {
				t.Errorf("prefix app:fence's guard record of orders: fence %d (%v), want the one it accepted", f, err)
			}
			for _, l := range held {
				unlock(t, l)
			}
		})
	}
}
