package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// commandsOf flattens round trips into the command names sent.
func commandsOf(calls [][]string) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c...)
	}
	return out
}

// graphReads are the commands a deadlock check reads the graph with
// (inspection's and the records' GET); the lock's own path sends none.
var graphReads = []string{"get", "type", "pttl", "zrange", "hgetall", "time"}

// TestDeadlockDetectionCostsNothingUntilItsDelay: a Lock whose ctx
// carries a lease sends nothing more when the lock is free; when it
// waits, it writes its record and deletes it (one SET, one DEL) and reads
// nothing while it has waited less than the delay; a Client without
// detection does not even write.
func TestDeadlockDetectionCostsNothingUntilItsDelay(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		opts       []dlock.Option
		sets, dels int
	}{
		{"detecting", []dlock.Option{dlock.WithDeadlockDelay(time.Hour)}, 1, 1},
		{"without", []dlock.Option{dlock.WithoutDeadlockDetection()}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rec := countedClient(t, tc.opts...)
			other := client(t)
			x, y := lockName(t)+"-x", lockName(t)+"-y"
			ly := mustLock(t, c.Mutex(y), ctx)
			rec.take()

			// free: the uncontended path, with a lease in ctx
			lx := mustLock(t, c.Mutex(x), ly.Context(ctx))
			unlock(t, lx)
			if cmds := commandsOf(rec.take()); slices.Contains(cmds, "set") || slices.Contains(cmds, "del") {
				t.Errorf("an acquire that did not wait sent %v", cmds)
			}

			// held: it waits, until the holder lets go
			held := mustLock(t, other.Mutex(x), ctx)
			got := make(chan error, 1)
			go func() {
				l, err := c.Mutex(x).Lock(ly.Context(ctx))
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			waitForWaiter(t, other, x)
			unlock(t, held)
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			cmds := commandsOf(rec.take())
			if n := count(cmds, "set"); n != tc.sets {
				t.Errorf("%d SETs (wait records) in %v; want %d", n, cmds, tc.sets)
			}
			if n := count(cmds, "del"); n != tc.dels {
				t.Errorf("%d DELs in %v; want %d", n, cmds, tc.dels)
			}
			for _, r := range graphReads {
				if slices.Contains(cmds, r) {
					t.Errorf("a wait shorter than its delay read the graph: %v", cmds)
					break
				}
			}
			unlock(t, ly)
		})
	}
}

// waitForWaiter returns once lock name has a waiter registered, polling
// Redis (another Client's wait sends no signal here).
func waitForWaiter(t *testing.T, c *dlock.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Inspect(context.Background(), dlock.KindMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter on %q within 10 s", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

func TestDeadlockDelayRefused(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, 2 * time.Hour} {
		_, err := dlock.New(newRedis(t, srv), dlock.WithDeadlockDelay(d))
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("WithDeadlockDelay(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
}
