package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A fast script (internal/protocol/doc.go, "Fast scripts") gives way
// to its full script where the lock is contended, one round trip later,
// and the Client then sends the full script at once while the lock stays
// contended, through any handle of the lock: a first attempt that finds
// the lock held, a release that finds waiters, each answer as the full
// script alone would.
func TestFastScriptsGiveWay(t *testing.T) {
	ctx := context.Background()
	for _, fair := range []bool{false, true} {
		mutex := func(c *dlock.Client, name string) dlock.Locker {
			if fair {
				return c.FairMutex(name)
			}
			return c.Mutex(name)
		}
		// warm loads every script of the mutex on the server: lock_fast.lua
		// and lock.lua, unlock_fast.lua and unlock.lua; and has c make its
		// first acquire's checks. The lock it contends is another Client's:
		// contended, it is marked so in its Client's hints, a table that
		// names hash into, and one name in 512 shares the hint of the test's
		// lock (c's, marked so, would send the full scripts at once: a flake
		// of about a run in 256).
		warm := func(c *dlock.Client) {
			other := client(t)
			name := lockName(t) + "-warm"
			l := mustLock(t, mutex(other, name), ctx)
			waiting := make(chan *dlock.Lease, 1)
			go func() { waiting <- lockOrNil(t, mutex(client(t), name)) }()
			waitQueued(t, client(t), dlock.KindMutex, name, 1)
			unlock(t, l)
			if wl := <-waiting; wl != nil {
				unlock(t, wl)
			}
			unlock(t, mustLock(t, mutex(c, name), ctx)) // uncontended: c's hints stay as they were
		}
		t.Run(fmt.Sprintf("fair=%v/a first attempt finds the lock held", fair), func(t *testing.T) {
			name := lockName(t)
			held := mustLock(t, client(t).Mutex(name), ctx)
			defer unlock(t, held)
			c, rec := countedClient(t)
			warm(c)
			m := mutex(c, name)
			rec.take()
			if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("fair %v: TryLock of a held lock: %v; want ErrNotObtained", fair, err)
			}
			if calls := refusedAcquire(t, rec.take()); len(calls) != 2 {
				t.Fatalf("fair %v: the first TryLock sent %v; want two round trips: lock_fast.lua, which found it held, then lock.lua", fair, calls)
			}
			rec.takeScriptWords()
			// through a handle made anew: the hint is the Client's
			if _, err := mutex(c, name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("fair %v: TryLock of a held lock, again: %v; want ErrNotObtained", fair, err)
			}
			if calls, words := refusedAcquire(t, rec.take()), rec.takeScriptWords(); len(calls) != 1 || words != fullWords {
				t.Fatalf("fair %v: the next TryLock sent %v, %d words; want one round trip of %d words: lock.lua at once, the lock known contended", fair, calls, words, fullWords)
			}
		})
		t.Run(fmt.Sprintf("fair=%v/a release finds a waiter", fair), func(t *testing.T) {
			name := lockName(t)
			c, rec := countedClient(t)
			warm(c)
			m := mutex(c, name)
			l := mustLock(t, m, ctx)
			got := make(chan *dlock.Lease, 1)
			go func() { got <- lockOrNil(t, mutex(client(t), name)) }()
			waitQueued(t, client(t), dlock.KindMutex, name, 1)
			rec.take()
			unlock(t, l)
			if calls := rec.take(); len(calls) != 2 {
				t.Fatalf("fair %v: the release sent %v; want two round trips: unlock_fast.lua, which found a waiter, then unlock.lua", fair, calls)
			}
			wl := <-got // handed the lock by unlock.lua (never told, it would wait out the test's timeout)
			if wl == nil {
				t.FailNow()
			}
			defer unlock(t, wl)
			if wl.Fence() <= l.Fence() {
				t.Fatalf("fair %v: the waiter's fence %d is not above the holder's %d", fair, wl.Fence(), l.Fence())
			}
			rec.takeScriptWords()
			if _, err := mutex(c, name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("fair %v: TryLock of the lock the waiter holds: %v; want ErrNotObtained", fair, err)
			}
			if calls, words := refusedAcquire(t, rec.take()), rec.takeScriptWords(); len(calls) != 1 || words != fullWords {
				t.Fatalf("fair %v: the holder's next TryLock sent %v, %d words; want one round trip of %d words: lock.lua at once, the lock known contended", fair, calls, words, fullWords)
			}
		})
	}
}

// refusedAcquire returns the round trips of a refused acquire's script
// calls: those before the read of who holds the lock (BusyError), which
// follows the refusal and must read only.
func refusedAcquire(t *testing.T, calls [][]string) [][]string {
	t.Helper()
	for i, c := range calls {
		if !slices.Contains(c, "evalsha") && !slices.Contains(c, "eval") {
			for _, rt := range calls[i:] {
				for _, n := range rt {
					if !slices.Contains([]string{"time", "type", "pttl", "zrange", "hgetall", "get"}, n) {
						t.Errorf("the read of who holds the lock sent %s (%v)", n, calls[i:])
					}
				}
			}
			return calls[:i]
		}
	}
	return calls
}

// fullWords is the length of lock.lua's call of an acquire: EVALSHA, the
// SHA, the number of keys, 5 keys, 9 arguments.
const fullWords = 3 + 5 + 9

// A FairMutex found free while others wait (its holder's lease ran out,
// with no release to hand it on) goes to the first waiter, not to a
// newcomer: lock_fast.lua takes it only when the queue is empty too.
func TestFairNewcomerDoesNotPassAFreeLocksWaiters(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	a := mustLock(t, client(t).FairMutex(name), ctx)
	got := make(chan *dlock.Lease, 1)
	go func() { got <- lockOrNil(t, client(t).FairMutex(name)) }()
	waitQueued(t, client(t), dlock.KindMutex, name, 1) // a FairMutex has a Mutex's keys
	// the holder's lease runs out (as its TTL would make it)
	if err := newRedis(t, srv).Del(ctx, "dlock:{"+name+"}").Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := client(t).FairMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		if l != nil {
			unlock(t, l)
		}
		t.Fatalf("a newcomer's TryLock of a free FairMutex with a waiter: %v; want ErrNotObtained", err)
	}
	wl := <-got // handed the lock by the newcomer's attempt (lock.lua's hand_on)
	if wl == nil {
		t.FailNow()
	}
	unlock(t, wl)
	if err := a.Unlock(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("the first holder's Unlock: %v; want ErrLeaseLost", err)
	}
}

// lockOrNil is m.Lock bounded by the test: nil (the error logged) if it
// fails, or if the test ends first (so a goroutine waiting in it never
// fails a test that has ended, nor outlives it).
func lockOrNil(t *testing.T, m dlock.Locker) *dlock.Lease {
	l, err := m.Lock(t.Context())
	if err != nil {
		if t.Context().Err() == nil {
			t.Log(err)
		}
		return nil
	}
	return l
}

// With replica sync every round trip of a grant ends with a WAIT, which
// blocks its whole timeout where replicas are missing: so an acquire goes
// to the full script at once, never through a fast script that would give
// way to it a round trip (and a WAIT) later.
func TestReplicaSyncSendsTheFullScriptAtOnce(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	held := mustLock(t, client(t).Mutex(name), ctx)
	defer unlock(t, held)
	c, rec := countedClient(t, dlock.WithReplicaSync(1, 10*time.Millisecond))
	// the scripts loaded (the grant itself fails here: no replica acknowledges it)
	if _, err := c.Mutex(name + "-warm").TryLock(ctx); !errors.Is(err, dlock.ErrReplicaSync) {
		t.Fatalf("TryLock with replica sync and no replica: %v; want ErrReplicaSync", err)
	}
	rec.take()
	// (held, and no replica to acknowledge: either error will do here)
	if l, err := c.Mutex(name).TryLock(ctx); err == nil {
		unlock(t, l)
		t.Fatal("TryLock of a held lock with replica sync: obtained")
	}
	// then the undoing of what the failed grant may have taken: no WAIT
	calls := rec.take()
	waits := 0
	for _, trip := range calls {
		for _, cmd := range trip {
			if cmd == "wait" {
				waits++
			}
		}
	}
	if len(calls) == 0 || !slices.Equal(calls[0], []string{"evalsha", "wait"}) || waits != 1 {
		t.Fatalf("it sent %v; want one round trip of the grant: lock.lua and WAIT", calls)
	}
}
