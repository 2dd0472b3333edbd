package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Every call that takes a ctx returns when it ends, whatever the server
// does, on a go-redis client made with its defaults (no
// ContextTimeoutEnabled: go-redis then waits for a reply for its
// ReadTimeout, 3 s, and retries three times). A grant whose reply came
// after its caller gave up is released, not left held. (Issue 16: a Lock
// with a 200 ms ctx returned after 1.9 s under DEBUG SLEEP 2 and CLIENT
// PAUSE, 15 s under SIGSTOP, and was granted.)
func TestCallsReturnWhenTheirContextEndsWhileTheServerStalls(t *testing.T) {
	t.Parallel() // a server of its own that it stalls, mostly waiting: beside the other such tests
	const (
		stall = 3 * time.Second
		limit = 200 * time.Millisecond // each call's ctx
		// late is how long after its ctx a call may return here: the
		// promise is 50 ms; this leaves room for a loaded CI machine
		// under -race, and is still far below what go-redis takes.
		late = time.Second
	)
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	for _, how := range []struct {
		name  string
		stall func(t *testing.T)
		end   func(t *testing.T)
	}{
		{"SIGSTOP", func(t *testing.T) {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) {
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
		}},
		{"CLIENT PAUSE", func(t *testing.T) {
			if err := admin.Do(context.Background(), "CLIENT", "PAUSE", stall.Milliseconds(), "ALL").Err(); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"DEBUG SLEEP", func(t *testing.T) {
			go admin.Do(context.Background(), "DEBUG", "SLEEP", stall.Seconds())
			// A stalled server answers nobody: see it not answer.
			probe := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 50*time.Millisecond, -1 })
			waitFor(t, "the server asleep", func() bool { return probe.Ping(context.Background()).Err() != nil })
		}, nil},
	} {
		t.Run(how.name, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, newRedis(t, s))
			other := newClient(t, newRedis(t, s))
			names := map[string]string{}
			for _, n := range []string{"free", "held", "try", "sem", "read", "all1", "all2", "unlock", "extend", "latch",
				"efree", "eheld", "eproclaim", "eresign"} {
				names[n] = lockName(t) + "-" + n
			}
			// Warm up: connections made, scripts loaded, subscribed.
			unlock(t, mustLock(t, c.Mutex(names["free"]), ctx))
			holder := mustLock(t, other.Mutex(names["held"]), ctx)
			toUnlock := mustLock(t, c.Mutex(names["unlock"]), ctx)
			toExtend := mustLock(t, c.Mutex(names["extend"]), ctx)
			if _, err := c.Latch(names["latch"]).TrySetCount(ctx, 1, time.Minute); err != nil {
				t.Fatal(err)
			}
			heldLeader := campaign(t, other.Election(names["eheld"]), "other")
			toProclaim := campaign(t, c.Election(names["eproclaim"]), "v")
			toResign := campaign(t, c.Election(names["eresign"]), "v")
			var leaders []*dlock.Leadership
			var mu sync.Mutex
			// won keeps a leadership granted before the stall took hold.
			won := func(ld *dlock.Leadership, err error) error {
				if ld != nil {
					mu.Lock()
					leaders = append(leaders, ld)
					mu.Unlock()
				}
				return err
			}

			calls := map[string]func(ctx context.Context) (*dlock.Lease, error){
				"Lock (free)": func(ctx context.Context) (*dlock.Lease, error) { return c.Mutex(names["free"]).Lock(ctx) },
				"Lock (held)": func(ctx context.Context) (*dlock.Lease, error) { return c.Mutex(names["held"]).Lock(ctx) },
				"TryLock":     func(ctx context.Context) (*dlock.Lease, error) { return c.Mutex(names["try"]).TryLock(ctx) },
				"Acquire":     func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore(names["sem"], 2).Acquire(ctx, 1) },
				"RLock":       func(ctx context.Context) (*dlock.Lease, error) { return c.RWMutex(names["read"]).RLock(ctx) },
				"LockAll": func(ctx context.Context) (*dlock.Lease, error) {
					return dlock.LockAll(ctx, c.Mutex(names["all1"]), c.Mutex(names["all2"]))
				},
				"Unlock": func(ctx context.Context) (*dlock.Lease, error) { return nil, toUnlock.Unlock(ctx) },
				"Extend": func(ctx context.Context) (*dlock.Lease, error) { return nil, toExtend.Extend(ctx, time.Minute) },
				"TTL":    func(ctx context.Context) (*dlock.Lease, error) { _, err := toExtend.TTL(ctx); return nil, err },
				"Inspect": func(ctx context.Context) (*dlock.Lease, error) {
					_, err := c.Inspect(ctx, dlock.KindMutex, names["held"])
					return nil, err
				},
				"Latch.Wait": func(ctx context.Context) (*dlock.Lease, error) {
					return nil, c.Latch(names["latch"]).Wait(ctx)
				},
				"Campaign (free)": func(ctx context.Context) (*dlock.Lease, error) {
					return nil, won(c.Election(names["efree"]).Campaign(ctx, "v"))
				},
				"Campaign (held)": func(ctx context.Context) (*dlock.Lease, error) {
					return nil, won(c.Election(names["eheld"]).Campaign(ctx, "v"))
				},
				"Leader": func(ctx context.Context) (*dlock.Lease, error) {
					_, err := c.Election(names["eheld"]).Leader(ctx)
					return nil, err
				},
				"Proclaim": func(ctx context.Context) (*dlock.Lease, error) { return nil, toProclaim.Proclaim(ctx, "w") },
				"Resign":   func(ctx context.Context) (*dlock.Lease, error) { return nil, toResign.Resign(ctx) },
			}

			how.stall(t)
			stalled := time.Now()
			var leases []*dlock.Lease
			var wg sync.WaitGroup
			for what, call := range calls {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(ctx, limit)
					defer cancel()
					deadline, _ := ctx.Deadline()
					l, err := call(ctx)
					if over := time.Since(deadline); over > late {
						t.Errorf("%s returned %v after its ctx ended (err %v)", what, over.Round(time.Millisecond), err)
					}
					if l != nil {
						// granted before the stall took hold: fine, but give it back
						mu.Lock()
						leases = append(leases, l)
						mu.Unlock()
					} else if err != nil && !errors.Is(err, context.DeadlineExceeded) && what != "Unlock" && what != "Resign" {
						t.Errorf("%s: %v; want an error matching context.DeadlineExceeded", what, err)
					}
				})
			}
			wg.Wait()
			if how.end != nil {
				how.end(t)
			}
			t.Logf("every call returned %v after the stall began", time.Since(stalled).Round(time.Millisecond))
			for _, l := range leases {
				_ = l.Unlock(ctx)
			}
			unlock(t, holder)
			_ = toExtend.Unlock(ctx)
			for _, ld := range append(leaders, heldLeader, toProclaim) {
				_ = ld.Resign(ctx)
			}

			// Whatever the stalled server granted late is given back: every
			// lock is free long before its 30 s TTL.
			for _, n := range []string{"free", "held", "try", "read", "all1", "all2", "unlock", "extend",
				"efree", "eheld", "eproclaim", "eresign"} {
				k := keysOf(names[n]).Lock
				if n == "read" {
					k = fmt.Sprintf("%s:{%s}:rw", dlock.DefaultPrefix, names[n])
				}
				if n[0] == 'e' && n != "extend" {
					k, _, _ = electionKeys(names[n])
				}
				waitFor(t, n+" released", func() bool { return admin.Exists(ctx, k).Val() == 0 })
			}
			sem := c.Semaphore(names["sem"], 2)
			waitFor(t, "the semaphore's permits free", func() bool {
				_, free, err := sem.Permits(ctx)
				return err == nil && free == 2
			})
		})
	}
}

// An Extend to a shorter lease whose ctx ended before Redis answered may
// still be applied — after the server resumes, say. Its holder must then
// count its lease as the shorter one: otherwise the server lets the lock
// go while the lease still says it is held.
func TestExtendGivenUpCountsTheShorterLease(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	c := newClient(t, newRedis(t, s))
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithLease(time.Minute)) // fixed: no renewal moves it
	const short = 300 * time.Millisecond
	if err := l.Extend(ctx, time.Minute); err != nil { // the server has the script
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 500, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := l.Extend(ectx, short)
	cancel()
	if err == nil {
		t.Skip("the Extend was answered before the pause took hold")
	}
	// The pause ends, the Extend runs, and the lock expires 300 ms later.
	k := keysOf(name).Lock
	waitFor(t, "the lock expired on the server", func() bool { return admin.Exists(ctx, k).Val() == 0 })
	if err := l.Err(); err == nil {
		t.Fatal("the lock expired on the server while its lease said it was held: the Extend given up on was applied, " +
			"and the holder kept counting the longer lease")
	}
}
