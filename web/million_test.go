package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// millionEnv runs TestMillionKeys: DLOCK_WEB_MILLION=1 (never in the
// default run: it fills a server with three million keys, about 40 s).
const millionEnv = "DLOCK_WEB_MILLION"

// TestMillionKeys measures what one refresh costs on a big prefix, for
// docs/operating.md ("A live page and metrics"): a fresh redis-server,
// a few real locks held and waited for, then
//
//  1. a million keys under another prefix (DEBUG POPULATE);
//  2. a million more under the prefix that are not locks (data kept
//     beside the locks);
//  3. a million more that are held Mutexes (pipelined SETs shaped as
//     a real one's key).
//
// For each: one Client.Snapshot's time, its heap allocation, the keys
// walked and the locks past Limit; the server's worst latency meanwhile
// (the slowest round trip of a PING loop on its own connection, in
// this process: its GC pauses count too; and LATENCY LATEST's worst
// command, the server's own); the SCAN pass alone; a Snapshot with a
// narrow Pattern; and the handler's /api/snapshot,
// cold (the request that reads) and warm (the others of the interval).
// Run without -race (the race detector slows the client's side
// several times over):
//
//	DLOCK_WEB_MILLION=1 go test ./web -run TestMillionKeys -v -count=1
func TestMillionKeys(t *testing.T) {
	if os.Getenv(millionEnv) != "1" {
		t.Skip("fills a server with three million keys: run with " + millionEnv + "=1")
	}
	rs := redistest.StartT(t, redistest.Options{})
	rdb := rs.Client(func(o *redis.Options) { o.ReadTimeout = time.Minute })
	defer rdb.Close()
	ctx := testCtx(t)
	const prefix = "shop"
	c, err := dlock.New(rdb, dlock.WithPrefix(prefix), dlock.WithOwnerLabel("million"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// a few real locks: three Mutexes (one waited for), a Semaphore
	for _, n := range []string{"orders/1", "orders/2", "payments"} {
		l, err := c.Mutex(n, dlock.WithTTL(10*time.Minute)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(context.Background())
	}
	s, err := c.Semaphore("pool", 4, dlock.WithTTL(10*time.Minute)).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(context.Background())
	w := lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) { return c.Mutex("payments").Lock(ctx) })
	defer w.stop()
	waitWaiters(t, c, dlock.KindMutex, "payments", 1)

	admin := rs.Client(func(o *redis.Options) { o.ReadTimeout = time.Minute })
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "latency-monitor-threshold", "1").Err(); err != nil {
		t.Fatal(err)
	}

	measure := func(what string) {
		t.Helper()
		dbsize, _ := admin.DBSize(ctx).Result()
		mem, _ := admin.Info(ctx, "memory").Result()
		_ = admin.Do(ctx, "LATENCY", "RESET").Err()
		// the server's latency: PINGs on a connection of their own
		pinger := rs.Client(func(o *redis.Options) { o.PoolSize = 1 })
		defer pinger.Close()
		stop := make(chan struct{})
		var worst time.Duration
		var pings int
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if err := pinger.Ping(ctx).Err(); err != nil {
					t.Errorf("PING: %v", err)
					return
				}
				worst = max(worst, time.Since(t0))
				pings++
			}
		})
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		t0 := time.Now()
		snap, err := c.Snapshot(ctx, dlock.SnapshotOptions{})
		took := time.Since(t0)
		runtime.ReadMemStats(&ms1)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", what, err)
		}
		// the SCAN pass alone, as Snapshot makes it (COUNT 1000)
		t3 := time.Now()
		var cursor uint64
		pages := 0
		for {
			_, next, err := admin.Scan(ctx, cursor, prefix+":*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if cursor = next; cursor == 0 {
				break
			}
		}
		scan := time.Since(t3)
		// a Pattern narrows what is inspected and kept, not the walk
		t4 := time.Now()
		if _, err := c.Snapshot(ctx, dlock.SnapshotOptions{Pattern: "orders/*"}); err != nil {
			t.Fatal(err)
		}
		narrow := time.Since(t4)
		lat, _ := admin.Do(ctx, "LATENCY", "LATEST").Slice()
		latency := "none over 1ms"
		if len(lat) > 0 {
			latency = fmt.Sprint(lat)
		}
		// the handler: the cold request reads, a warm one is served from it
		srv := httptest.NewServer(New(c, Options{Logger: quiet}))
		defer srv.Close()
		t1 := time.Now()
		get(t, srv, "/api/snapshot", 200)
		cold := time.Since(t1)
		t2 := time.Now()
		body := get(t, srv, "/api/snapshot", 200)
		warm := time.Since(t2)
		t.Logf("%s: %d keys in the db (%s); Snapshot %v (%d keys walked, %d locks inspected, %d more not), %.0f MB allocated; "+
			"PING worst %v over %d pings; LATENCY LATEST %s; the SCAN pass alone %v (%d pages); Snapshot with Pattern \"orders/*\" %v; /api/snapshot cold %v, warm %v (%d bytes)",
			what, dbsize, usedMemory(mem), took.Round(time.Millisecond), snap.Keys, len(snap.Locks), snap.More,
			float64(ms1.TotalAlloc-ms0.TotalAlloc)/1e6, worst.Round(100*time.Microsecond), pings, latency,
			scan.Round(time.Millisecond), pages, narrow.Round(time.Millisecond), cold.Round(time.Millisecond), warm.Round(time.Microsecond), len(body))
		if len(snap.Locks) == 0 || snap.Locks[0].Name == "" {
			t.Errorf("%s: the held locks are not in the snapshot", what)
		}
		if cold > 10*time.Second {
			t.Errorf("%s: /api/snapshot took %v, past the refresh's 10 s timeout", what, cold)
		}
	}

	measure("baseline (a few locks)")

	// SCAN's MATCH filters what a page returns, not what it walks: keys
	// of another prefix lengthen the walk too
	if err := admin.Do(ctx, "DEBUG", "POPULATE", 1_000_000, "other:data", 32).Err(); err != nil {
		t.Fatal(err)
	}
	measure("1M keys under another prefix")
	t0 := time.Now()
	if err := admin.Do(ctx, "DEBUG", "POPULATE", 1_000_000, prefix+":data", 32).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("DEBUG POPULATE of a million keys: %v", time.Since(t0).Round(time.Millisecond))
	measure("1M keys under the prefix that are not locks (and 1M of another)")

	// a million held Mutexes: each key as a real one's (the lock's key
	// holds its holder's token)
	tok, err := admin.Get(ctx, prefix+":{orders/1}").Result()
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	const batch = 10_000
	for i := 0; i < 1_000_000; i += batch {
		pipe := admin.Pipeline()
		for j := i; j < i+batch; j++ {
			pipe.Set(ctx, prefix+":{job-"+strconv.Itoa(j)+"}", tok, 10*time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("a million held Mutexes' keys, pipelined: %v", time.Since(t0).Round(time.Millisecond))
	measure("1M more keys that are held Mutexes")
}

// usedMemory is INFO memory's used_memory_human.
func usedMemory(info string) string {
	const k = "used_memory_human:"
	for i := 0; i+len(k) < len(info); i++ {
		if info[i:i+len(k)] == k {
			j := i + len(k)
			for j < len(info) && info[j] != '\r' && info[j] != '\n' {
				j++
			}
			return info[i+len(k):j] + " used"
		}
	}
	return "?"
}
