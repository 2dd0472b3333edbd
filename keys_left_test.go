package dlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// useEveryKind locks and releases the names with each kind that takes
// fences (Mutex, FairMutex with a waiter handed the lock, RWMutex's two
// sides, Semaphore, Election) on a and b.
func useEveryKind(t *testing.T, a, b *dlock.Client, names []string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		unlock(t, mustLock(t, a.Mutex(name), ctx))

		// a FairMutex whose release hands the lock to a waiter
		held := mustLock(t, a.FairMutex(name+"/fair"), ctx)
		var wg sync.WaitGroup
		var got *dlock.Lease
		var err error
		wg.Go(func() { got, err = b.FairMutex(name + "/fair").Lock(ctx) })
		waitFor(t, "the waiter's place", func() bool {
			ws, ierr := a.Inspect(ctx, dlock.KindMutex, name+"/fair")
			return ierr == nil && len(ws.Waiters) == 1
		})
		unlock(t, held)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		unlock(t, got)

		rw := a.RWMutex(name)
		unlock(t, mustLock(t, rw.RLocker(), ctx))
		unlock(t, mustLock(t, rw, ctx))
		p, err := a.Semaphore(name, 2).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		unlock(t, p)
		ld, err := a.Election(name).Campaign(ctx, "me")
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// persistentKeys returns the keys on rdb that never expire, and the longest
// TTL of the others but the Clients' own records (one a Client, for a day:
// internal/deploy/owner.go).
func persistentKeys(t *testing.T, rdb *redis.Client) (keys []string, longest time.Duration) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		ttl, err := rdb.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -1 {
			keys = append(keys, iter.Val())
		}
		if !strings.HasPrefix(iter.Val(), dlock.DefaultPrefix+":client:") {
			longest = max(longest, ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys, longest
}

// someNames returns n names for this test.
func someNames(t *testing.T, n int) []string {
	base := lockName(t)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s/orders/%d", base, i)
	}
	return names
}

// namesInSlots returns perSlot names in each of slots cluster slots: a
// counter per name, not per slot, would leave perSlot keys in a slot.
func namesInSlots(t *testing.T, slots, perSlot int) []string {
	base := lockName(t)
	in := map[int][]string{}
	var names []string
	for i := 0; len(names) < slots*perSlot; i++ {
		name := fmt.Sprintf("%s/orders/%d", base, i)
		s := redistest.KeySlot(keysOf(name).Lock)
		if len(in) < slots || len(in[s]) > 0 {
			if len(in[s]) < perSlot {
				in[s] = append(in[s], name)
				names = append(names, name)
			}
		}
	}
	return names
}

// A name that was locked and released leaves no key that outlives its
// lock: what stays forever is one fence counter (per cluster slot on a
// cluster), not one per name ever used.
func TestNoKeyOutlivesItsLock(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	a := newClient(t, newRedis(t, s))
	b := newClient(t, newRedis(t, s))
	useEveryKind(t, a, b, someNames(t, 60))
	keys, longest := persistentKeys(t, newRedis(t, s))
	if len(keys) > 2 {
		t.Errorf("%d keys never expire after 60 names of 5 kinds were used, e.g. %q", len(keys), keys[:min(len(keys), 5)])
	}
	if limit := dlock.DefaultTTL + dlock.DefaultQueueTTL; longest > limit {
		t.Errorf("a key outlives its lock by %v (more than a lease and a place: %v)", longest, limit)
	}
}

// On a cluster the fence counters are one per hash slot: the keys that
// stay are at most one per slot the names fell in (and the fold's mark).
func TestClusterNoKeyOutlivesItsLock(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	a := newClient(t, clusterClient(t, cl))
	b := newClient(t, clusterClient(t, cl))
	useEveryKind(t, a, b, namesInSlots(t, 4, 5))
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	// The fold's mark is one key of its own, whose slot may be one a
	// counter is in too (CI met it: "dlock:fence:folded" is in slot 973);
	// it is counted apart, and every other key is a slot's one counter.
	mark := dlock.DefaultPrefix + ":fence:folded"
	slots := map[int][]string{}
	var all []string
	for _, m := range masters {
		keys, longest := persistentKeys(t, newRedis(t, m))
		if limit := dlock.DefaultTTL + dlock.DefaultQueueTTL; longest > limit {
			t.Errorf("a key outlives its lock by %v (more than a lease and a place: %v)", longest, limit)
		}
		for _, k := range keys {
			if k != mark {
				slots[redistest.KeySlot(k)] = append(slots[redistest.KeySlot(k)], k)
			}
		}
		all = append(all, keys...)
	}
	for slot, keys := range slots {
		if len(keys) > 1 {
			t.Errorf("%d keys never expire in slot %d after 5 names of 5 kinds in each of 4 slots were used: %q", len(keys), slot, keys)
		}
	}
	if len(all) > 1+4+20 { // the mark, a counter for each slot and for each FairMutex's slot
		t.Errorf("%d keys never expire after 20 names of 5 kinds were used: %q", len(all), all)
	}
}

// legacyFences leaves what an older dlock left for name's locks: a fence
// counter per lock, at high values; it returns the highest.
func legacyFences(t *testing.T, rdb redis.Cmdable, name string) int64 {
	t.Helper()
	ctx := context.Background()
	high := int64(0)
	for i, sfx := range []string{"", ":rw", ":sem", ":election"} {
		v := int64(1000 * (i + 1))
		key := keysOf(name).Lock + sfx + ":fence"
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		high = max(high, v)
	}
	return high
}

// fencesOf takes one fence of each kind of name's locks.
func fencesOf(t *testing.T, c *dlock.Client, name string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	got := map[string]int64{}
	l := mustLock(t, c.Mutex(name), ctx)
	got["mutex"] = l.Fence()
	unlock(t, l)
	l = mustLock(t, c.RWMutex(name), ctx)
	got["rwmutex"] = l.Fence()
	unlock(t, l)
	l, err := c.Semaphore(name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got["semaphore"] = l.Fence()
	unlock(t, l)
	ld, err := c.Election(name).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	got["election"] = ld.Term()
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

// An upgrade from the layout of a counter per lock never gives a fence at
// or below one already given: the old counters are folded into the
// shared ones before the first fence, and then deleted.
func TestFencesAboveAnOlderLayouts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"single", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var admin redis.UniversalClient
			var mk func() *dlock.Client
			if tc.cluster {
				cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
				admin = clusterClient(t, cl)
				mk = func() *dlock.Client { return newClient(t, clusterClient(t, cl)) }
			} else {
				s := redistest.StartT(t, redistest.Options{})
				admin = newRedis(t, s)
				mk = func() *dlock.Client { return newClient(t, newRedis(t, s)) }
			}
			names := []string{lockName(t), lockName(t) + "/b"}
			high := int64(0)
			for _, n := range names {
				high = max(high, legacyFences(t, admin, n))
			}
			c := mk()
			for _, n := range names {
				for kd, f := range fencesOf(t, c, n) {
					if f <= high {
						t.Errorf("%s %q: fence %d, not above the older layout's %d", kd, n, f, high)
					}
				}
				if left, err := admin.Exists(context.Background(), keysOf(n).Lock+":fence").Result(); err != nil || left != 0 {
					t.Errorf("%q: the older layout's counter is still there (%d, %v)", n, left, err)
				}
			}
		})
	}
}

// Switching WithSlotFences on a deployment that gave fences (a proxy
// found to shard, say) never gives a fence at or below one already
// given, either way.
func TestFencesAcrossASwitchOfLayout(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	name := lockName(t)
	last := int64(0)
	for i, slots := range []bool{false, true, false, true} {
		c := newClient(t, newRedis(t, s), dlock.WithSlotFences(slots))
		for kd, f := range fencesOf(t, c, name) {
			if f <= last {
				t.Errorf("step %d (slot fences %v): %s fence %d, not above %d", i, slots, kd, f, last)
			}
		}
		for _, f := range fencesOf(t, c, name) {
			last = max(last, f)
		}
	}
}

// A Client whose fold finds the mark of the other WithSlotFences layout
// (a Client of that layout ran, and may run still, which repeats fences:
// guarantees.md) says so in one warning; one of the same layout says
// nothing.
func TestSwitchOfLayoutWarns(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	name := lockName(t)
	for i, slots := range []bool{true, true, false} {
		var logs syncBuffer
		c := newClient(t, newRedis(t, s), dlock.WithSlotFences(slots),
			dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		unlock(t, mustLock(t, c.Mutex(name), ctx))
		warned := strings.Contains(logs.String(), "WithSlotFences")
		if want := i == 2; warned != want {
			t.Errorf("Client %d (slot fences %v): warned %v, want %v; logs: %q", i, slots, warned, want, logs.String())
		}
	}
}

// A Client started after the shared fence counter was deleted (every
// lock's fences restart at 1: guarantees.md) says so in one warning: the
// fold's mark is there, and a fold leaves the counter before its mark.
// Clients before it, the first on a fresh server among them, say nothing.
func TestLostFenceCounterWarns(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	admin := newRedis(t, s)
	name := lockName(t)
	start := func() (*dlock.Client, *syncBuffer) {
		var logs syncBuffer
		return newClient(t, newRedis(t, s), dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))), &logs
	}
	// two Clients' first acquires at once on a fresh server
	a, logA := start()
	b, logB := start()
	var wg sync.WaitGroup
	for _, c := range []*dlock.Client{a, b} {
		wg.Go(func() {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			unlock(t, l)
		})
	}
	wg.Wait()
	c, logC := start()
	unlock(t, mustLock(t, c.Mutex(name), ctx))
	for i, logs := range []*syncBuffer{logA, logB, logC} {
		if strings.Contains(logs.String(), "fence counter") {
			t.Errorf("Client %d warned of a lost counter on a server that has it: %q", i, logs.String())
		}
	}
	if err := admin.Del(ctx, "dlock:fence").Err(); err != nil {
		t.Fatal(err)
	}
	d, logD := start()
	unlock(t, mustLock(t, d.Mutex(name), ctx))
	if !strings.Contains(logD.String(), "fence counter is gone") {
		t.Errorf("a Client started after the counter was deleted: no warning; logs %q", logD.String())
	}
}
