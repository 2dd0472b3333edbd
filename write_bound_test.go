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
// none returns only once the server runs again (before the fix, on the
// own connections, the slowest did: 39.7 s and 16.9 s), and none
// succeeds after its ctx ended. (Issue 45: on the own connections, 5.5–12.5 s late, one granted
// 12.5 s late; through the pool, 31–176 ms.)
func TestTryLockWhoseWriteBlocksReturnsAtCtxEnd(t *testing.T) {
	onlyGoRedis(t)
	redistest.Long(t) // 500 writers of 32 KiB under -race, twice: 10-17 s of a loaded 2-core machine
	const (
		callers = 500
		bound   = 200 * time.Millisecond
		// a write that ctx does not bound returns only once the server
		// runs again, 15 s in: a count of those, not a time, is the
		// check, so a loaded machine does not fail it
		resume = 15 * time.Second
	)
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
			var (
				mu     sync.Mutex
				leases []*dlock.Lease
			)
			b := redistest.BurstWhilePaused(t, s, callers, bound, resume, func(ctx context.Context, i int) error {
				l, err := c.Mutex(fmt.Sprint(long, i)).TryLock(ctx)
				if err == nil {
					mu.Lock()
					leases = append(leases, l)
					mu.Unlock()
				}
				return err
			})
			for _, l := range leases {
				_ = l.Unlock(context.Background())
			}
			t.Logf("%s: %d TryLocks with names of 32 KiB on a stopped server, ctx %v: the slowest returned after %v", way.name, callers, bound, b.Slowest)
			if b.AfterResume > 0 {
				t.Errorf("%d TryLocks returned only once the server ran again, %v in (slowest: %v): their ctx (%v) did not bound them", b.AfterResume, resume, b.Slowest, bound)
			}
			if b.Succeeded > 0 {
				t.Errorf("%d TryLocks succeeded after their ctx ended", b.Succeeded)
			}
		})
	}
}
