package dlock_test

// Attacks on the one-string mutex hold (lib_mutex.lua): a labelled
// Election handed the lock by a release, then a late copy of its own
// acquire; fences around 10^14, where the scripts switch from printing
// the counter's number to reading its string, through every path that
// grants a mutex.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A label of awkward bytes (spaces, a newline, a leading 'v', digits:
// what the hold's other words are made of) on a Campaign that a
// resigning leader's release hands the lock to: the label is recorded
// after the hand-off (label.lua), the value after it (elect.lua); a
// Proclaim replaces the value and keeps the label; a late copy of the
// Campaign's own acquire (go-redis re-sent it, or its bytes were held in
// the network), arriving after the Proclaim, changes nothing: neither
// the value (a late copy never overwrites a later value) nor the label,
// nor the lease (never shortened).
func TestAttackLabelledCampaignHandedThenProclaimThenLateCopy(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	c1, c2 := newClient(t, newRedis(t, s)), newClient(t, newRedis(t, s))
	name := lockName(t)
	for _, label := range []string{"v12 3 4\nlabel 0v  ", "7", "v", strings.Repeat("9 ", dlock.MaxLabel/2)} {
		ld1 := campaign(t, c1.Election(name), "one")
		e2 := c2.Election(name, dlock.WithLabel(label), dlock.WithTTL(5*time.Second))
		got := make(chan *dlock.Leadership, 1)
		go func() {
			ld, err := e2.Campaign(ctx, "two")
			if err != nil {
				t.Errorf("Campaign(two): %v", err)
			}
			got <- ld
		}()
		waitFor(t, "the second candidate queued", func() bool {
			info, err := c1.Inspect(ctx, dlock.KindElection, name)
			return err == nil && len(info.Waiters) == 1
		})
		if err := ld1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		ld2 := <-got
		if ld2 == nil {
			t.FailNow()
		}
		lock, _, _ := electionKeys(name)
		v, err := admin.Get(ctx, lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		h, ok := protocol.ParseHold(v)
		if !ok || h.Label != label || h.Value != "two" || !h.HasValue {
			t.Fatalf("after the hand-off: hold %q read as %+v (ok %v), want label %q, value two", v, h, ok, label)
		}
		check := func(when, value string) {
			t.Helper()
			li, err := c1.Election(name).Leader(ctx)
			if err != nil || li.Value != value || li.Term != ld2.Term() {
				t.Errorf("%s: Leader = %+v, %v; want value %q, term %d", when, li, err, value, ld2.Term())
			}
			info, err := c1.Inspect(ctx, dlock.KindElection, name)
			if err != nil || len(info.Holders) != 1 || info.Holders[0].Label != label || info.Holders[0].Token != h.Token {
				t.Errorf("%s: Inspect = %+v, %v; want one holder %s labelled %q", when, info, err, h.Token, label)
			}
		}
		check("handed", "two")
		if err := ld2.Proclaim(ctx, "three"); err != nil {
			t.Fatal(err)
		}
		check("proclaimed", "three")
		// The late copy: the Campaign's own attempt, word for word as it
		// sent it (its tail with the value it campaigned for).
		k := protocol.NewKeys(dlock.DefaultPrefix, protocol.ElectionKind, name)
		before, _ := admin.PTTL(ctx, lock).Result()
		a := protocol.LockArgs{Token: h.Token, TTL: 100, Fair: true,
			Wake:     protocol.WakeTo{BaseArg: "unused:", PublishArg: "PUBLISH"},
			Campaign: true, Tail: protocol.HoldTail(label, "two", true), Observers: k.Channel}
		r := a.Call(k).Run(ctx, goRedisDriver(t, admin))
		res, err := r.Int64Slice()
		if err != nil || len(res) != 2 || res[0] != 1 || res[1] != ld2.Term() {
			t.Fatalf("late copy: %v, %v; want held with fence %d", res, err, ld2.Term())
		}
		check("after the late copy", "three")
		if after, _ := admin.PTTL(ctx, lock).Result(); after < before-time.Second {
			t.Errorf("late copy shortened the lease: PTTL %v, then %v", before, after)
		}
		if err := ld2.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Fences around 10^14: lock_fast.lua and lock.lua's common case print a
// counter's number below it and read its string from it on; hand_on,
// take and lock_all.lua print through decimal. Every grant's fence must
// be the counter's value exactly, in the hold (Inspect) and the lease.
func TestAttackFencesAround1e14(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	c1, c2 := newClient(t, newRedis(t, s)), newClient(t, newRedis(t, s))
	name := lockName(t)
	unlock(t, mustLock(t, c1.Mutex(name), ctx)) // folds
	unlock(t, mustLock(t, c2.Mutex(name), ctx))
	const start = 100000000000000 - 4
	admin.Set(ctx, keysOf(name).Fence, start, 0)
	counter := func() int64 {
		n, err := admin.Get(ctx, keysOf(name).Fence).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	checkFence := func(what string, l *dlock.Lease, lockName string) {
		t.Helper()
		if want := counter(); l.Fence() != want {
			t.Errorf("%s: fence %d, want the counter's %d", what, l.Fence(), want)
		}
		info, err := c1.Inspect(ctx, dlock.KindMutex, lockName)
		if err != nil || info.Fence != l.Fence() {
			t.Errorf("%s: Inspect fence %d (%v), want %d", what, info.Fence, err, l.Fence())
		}
		v, _ := admin.Get(ctx, keysOf(lockName).Lock).Result()
		if h, ok := protocol.ParseHold(v); !ok || h.Fence != strconv.FormatInt(l.Fence(), 10) {
			t.Errorf("%s: hold %q", what, v)
		}
	}
	for i := 0; i < 3; i++ {
		// lock_fast.lua
		l := mustLock(t, c1.Mutex(name), ctx)
		checkFence("fast", l, name)
		// lock.lua's common case: c2 found it held, so its next
		// attempt goes to lock.lua
		if _, err := c2.Mutex(name).TryLock(ctx); err == nil {
			t.Fatal("TryLock won a held lock")
		}
		unlock(t, l)
		l = mustLock(t, c2.Mutex(name), ctx)
		checkFence("common", l, name)
		// hand_on: a renewing waiter is handed the lock by the release
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := c1.FairMutex(name).Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitFor(t, "a waiter queued", func() bool {
			info, err := c1.Inspect(ctx, dlock.KindMutex, name)
			return err == nil && len(info.Waiters) == 1
		})
		unlock(t, l)
		l = <-got
		if l == nil {
			t.FailNow()
		}
		checkFence("handed", l, name)
		// take: a fixed lease's waiter finds the lock kept for it
		go func() {
			l, err := c2.FairMutex(name).Lock(ctx, dlock.WithLease(5*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitFor(t, "a waiter queued", func() bool {
			info, err := c1.Inspect(ctx, dlock.KindMutex, name)
			return err == nil && len(info.Waiters) == 1
		})
		unlock(t, l)
		l = <-got
		if l == nil {
			t.FailNow()
		}
		checkFence("kept", l, name)
		unlock(t, l)
		// lock_all.lua
		other := name + "-b"
		set, err := dlock.LockAll(ctx, c1.Mutex(name), c1.Mutex(other))
		if err != nil {
			t.Fatal(err)
		}
		parts := set.Parts()
		checkFence("LockAll", parts[len(parts)-1], parts[len(parts)-1].Name())
		unlock(t, set)
	}
}

// A FairMutex freed while a fixed-lease waiter (which a release does not
// hand the lock to) waits is kept for it ('@next <member>'), and its next
// attempt takes it (lock.lua's take): that attempt writes the waiter's
// label into the hold, replacing the kept lock's string, and no label
// call follows. The label is there as soon as the Lock returns, and goes
// with the hold.
func TestAttackKeptLockTakenWithItsLabel(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	c1, c2 := newClient(t, newRedis(t, s)), newClient(t, newRedis(t, s))
	name := lockName(t)
	const label = "@next 1 2 3 v\n"
	held := mustLock(t, c1.FairMutex(name), ctx, dlock.WithLabel("first"))
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c2.FairMutex(name).Lock(ctx, dlock.WithLease(5*time.Second), dlock.WithLabel(label))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "a waiter queued", func() bool {
		info, err := c1.Inspect(ctx, dlock.KindMutex, name)
		return err == nil && len(info.Waiters) == 1
	})
	unlock(t, held)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	info, err := c1.Inspect(ctx, dlock.KindMutex, name)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Label != label || info.Holders[0].Token != l.Token() || info.KeptFor != "" {
		t.Errorf("Inspect = %+v, %v; want one holder %s labelled %q", info, err, l.Token(), label)
	}
	unlock(t, l)
	if n, _ := admin.Exists(ctx, keysOf(name).Lock).Result(); n != 0 {
		t.Errorf("the hold (and its label) outlived the release")
	}
}
