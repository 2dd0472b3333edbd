package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A TryLock whose write blocks returns when its ctx ends: the server
// stopped (SIGSTOP) while a thousand callers each send a name of 32 KiB,
// so the socket buffers fill and the write, not only the read, waits; on
// a go-redis client with ReadTimeout -1 (no timeout on the connection),
// through go-redis's pool and on dlock's own connections, side by side:
// the own connections' slowest is no later than the pool's (twice it,
// and at least bound+slack, for noise), and none succeeds after its ctx
// ended. (Issue 45: on the own connections, 5.5–12.5 s late, one granted
// 12.5 s late; through the pool, 31–176 ms.)
func TestTryLockWhoseWriteBlocksReturnsAtCtxEnd(t *testing.T) {
	onlyGoRedis(t)
	redistest.Long(t) // 500 writers of 32 KiB under -race, twice: 10-17 s of a loaded 2-core machine
	const (
		callers = 500
		bound   = 200 * time.Millisecond
		// slack: generous for -race on a loaded 2-core machine; a write
		// that ctx does not bound returns only at the resume, 15 s in.
		slack  = time.Second
		resume = 15 * time.Second
	)
	var poolWorst time.Duration
	for _, way := range []struct {
		name string
		opts []dlock.Option
	}{{"pool", []dlock.Option{dlock.WithoutOwnConnections()}}, {"own", nil}} {
		t.Run(way.name, func(t *testing.T) {
			s := redistest.StartT(t, redistest.Options{})
			rdb := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout = -1 })
			c := newClient(t, rdb, way.opts...)
			ctx := context.Background()
			unlock(t, mustLock(t, c.Mutex(lockName(t)+"-warm"), ctx)) // scripts loaded, connection up
			long := lockName(t) + strings.Repeat("n", 32<<10)
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			resume := time.AfterFunc(resume, func() { _ = s.Resume() })
			defer func() {
				if resume.Stop() {
					_ = s.Resume()
				}
			}()
			type result struct {
				took time.Duration
				l    *dlock.Lease
				err  error
			}
			results := make(chan result, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), bound)
					defer cancel()
					start := time.Now()
					l, err := c.Mutex(fmt.Sprint(long, i)).TryLock(ctx)
					results <- result{time.Since(start), l, err}
				})
			}
			wg.Wait()
			close(results)
			var worst time.Duration
			won := 0
			for r := range results {
				worst = max(worst, r.took)
				if r.err == nil {
					won++
					defer func() { _ = r.l.Unlock(context.Background()) }()
				}
			}
			t.Logf("%d TryLocks with names of 32 KiB on a stopped server, ctx %v: the slowest returned after %v", callers, bound, worst)
			if way.name == "pool" {
				poolWorst = worst
			} else if limit := max(bound+slack, 2*poolWorst); worst > limit {
				t.Errorf("the slowest TryLock returned after %v, its ctx %v; through go-redis's pool %v (limit %v)", worst, bound, poolWorst, limit)
			}
			if won > 0 {
				t.Errorf("%d TryLocks succeeded after their ctx ended", won)
			}
		})
	}
}
