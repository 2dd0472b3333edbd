package dlock_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
	"github.com/redis/go-redis/v9"
)

// checkLostUpdates runs workers goroutines, each taking the lock that
// lockerOf gives it rounds times and, under it, incrementing a counter with
// a racy read-pause-write; it fails the test if the counter ends anywhere
// but workers×rounds (an update was lost: two holders overlapped), or if a
// fence did not go up from one holder to the next.
func checkLostUpdates(t *testing.T, rdb redis.Cmdable, counterKey string, workers, rounds int, lockerOf func(i int) dlock.Locker) {
	t.Helper()
	ctx := context.Background()
	counter := history.NewCounter(rdb, counterKey)
	var mu sync.Mutex // orders the fence check inside the critical section
	lastFence := int64(0)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := lockerOf(i)
			for range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if l.Fence() <= lastFence {
					t.Errorf("fence %d not above the previous holder's %d", l.Fence(), lastFence)
				}
				lastFence = l.Fence()
				mu.Unlock()
				if err := counter.Increment(ctx, 200*time.Microsecond); err != nil {
					t.Error(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if v, err := counter.Value(ctx); v != int64(workers*rounds) || err != nil {
		t.Fatalf("counter %d (%v) after %d increments under the lock: updates lost", v, err, workers*rounds)
	}
}

// checkWokenByRelease has m wait for a lock that release frees, and fails
// the test unless the waiter gets it within 10 s: far below the 30 s lease
// of the holders these tests use, so only a release notification is quick
// enough.
func checkWokenByRelease(t *testing.T, m dlock.Locker, release func()) {
	t.Helper()
	ctx := context.Background()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := m.Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	// Let the waiter fail its first attempt and subscribe (sampling only:
	// the check is right whatever the interleaving).
	time.Sleep(50 * time.Millisecond)
	release()
	if err := <-got; err != nil {
		t.Fatalf("waiter after the release: %v", err)
	}
}

// runContenders starts procs helper processes contending for name (see
// helperContend) with the extra environment env, waits for them, and checks
// their merged history: every critical section recorded, none overlapping,
// fences strictly increasing.
func runContenders(t *testing.T, name string, procs, goroutines, rounds int, env ...string) {
	t.Helper()
	dir := t.TempDir()
	var hs []*helper
	for p := range procs {
		hs = append(hs, startHelper(t, "contend", append(env, nameEnv+"="+name, ttlEnv+"=2s",
			outEnv+"="+filepath.Join(dir, fmt.Sprint(p)),
			roundsEnv+"="+fmt.Sprint(rounds), workersEnv+"="+fmt.Sprint(goroutines))...))
	}
	var events []history.Event
	for p, h := range hs {
		if err := h.cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v", p, err)
		}
		f, err := os.Open(filepath.Join(dir, fmt.Sprint(p)))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := history.Read(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, evs...)
	}
	if want := procs * goroutines * rounds; len(events) != want {
		t.Fatalf("%d critical sections recorded, want %d", len(events), want)
	}
	if err := history.Check(events); err != nil {
		t.Fatal(err)
	}
}
