package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

const debugSlotMove = false

// slotMoveWaiters is how many Clients wait on the lock in BenchmarkSlotMove.
const slotMoveWaiters = 8

// BenchmarkSlotMove measures what a slot migration costs waiters on a
// Redis Cluster: each round, a Mutex is held and slotMoveWaiters Clients
// (each its own client, as processes) queue on it; in "moved" the lock's
// slot then migrates to another master (redistest.Cluster.MigrateSlot)
// before the release, in "still" it does not. done-ms is the time from
// the start of the release until the last waiter has taken and released
// the lock; compare moved with still (issue 25's target: within 2x).
// Each waiter holds the lock for no time, or, in the hold20ms cases, for
// 20 ms (the work of issue 25's measurement: its 8 waiters were done 168
// ms after the release): compare each moved case with its still case.
func BenchmarkSlotMove(b *testing.B) {
	for _, drv := range []string{"go-redis", "rueidis"} {
		for _, hold := range []time.Duration{0, 20 * time.Millisecond} {
			for _, move := range []bool{false, true} {
				name := drv + "/still"
				if move {
					name = drv + "/moved"
				}
				if hold > 0 {
					name += fmt.Sprintf("-hold%dms", hold.Milliseconds())
				}
				b.Run(name, func(b *testing.B) { slotMove(b, drv, move, hold) })
			}
		}
	}
}

func slotMove(b *testing.B, drv string, move bool, hold time.Duration) {
	ctx := context.Background()
	cl := cluster(b)
	newClient := func() *dlock.Client {
		if drv == "rueidis" {
			var addrs []string
			for _, n := range cl.Nodes() {
				addrs = append(addrs, n.Addr())
			}
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
			if err != nil {
				fatalf(b, "rueidis: %v", err)
			}
			c, err := rueidisdlock.New(rc)
			if err != nil {
				fatalf(b, "rueidisdlock: %v", err)
			}
			b.Cleanup(func() { _ = c.Close(); rc.Close() })
			return c
		}
		rdb := cl.Client()
		c, err := dlock.New(rdb)
		if err != nil {
			fatalf(b, "dlock: %v", err)
		}
		b.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
		return c
	}
	holder := newClient()
	waiters := make([]*dlock.Client, slotMoveWaiters)
	for i := range waiters {
		waiters[i] = newClient()
	}
	admin := cl.Client()
	defer func() { _ = admin.Close() }()
	masters, err := cl.Masters()
	if err != nil {
		fatalf(b, "%v", err)
	}
	opts := []dlock.LockOption{dlock.WithTTL(30 * time.Second), dlock.WithQueueTTL(30 * time.Second)}
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("slotmove-%d-%d", time.Now().UnixNano(), i)
		key := "dlock:{" + name + "}"
		l, err := holder.Mutex(name, opts...).Lock(ctx)
		if err != nil {
			fatalf(b, "holder: %v", err)
		}
		done := make(chan error, slotMoveWaiters)
		for _, w := range waiters {
			m := w.Mutex(name, opts...)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 25*time.Second)
				defer cancel()
				wl, err := m.Lock(wctx)
				if err == nil {
					time.Sleep(hold) // the work under the lock
					err = wl.Unlock(ctx)
				}
				done <- err
			}()
		}
		// Queued, and listening: every waiter's wake-up channel subscribed
		// on the slot's master (as in issue 25's measurement).
		from, err := cl.MasterOf(key)
		if err != nil {
			fatalf(b, "%v", err)
		}
		node := from.Client()
		listening := func() int {
			v, _ := node.Do(ctx, "PUBSUB", "SHARDCHANNELS", key+":wake:*").Slice()
			return len(v)
		}
		for admin.ZCard(ctx, key+":queue").Val() < slotMoveWaiters || listening() < slotMoveWaiters {
			time.Sleep(time.Millisecond)
		}
		_ = node.Close()
		if move {
			to := masters[0]
			if to == from {
				to = masters[1]
			}
			if _, err := cl.MigrateSlot(key, to); err != nil {
				fatalf(b, "%v", err)
			}
		}
		b.StartTimer()
		start := time.Now()
		if err := l.Unlock(ctx); err != nil {
			fatalf(b, "holder Unlock: %v", err)
		}
		unlocked := time.Since(start)
		var times []time.Duration
		for range slotMoveWaiters {
			if err := <-done; err != nil {
				fatalf(b, "waiter: %v", err)
			}
			times = append(times, time.Since(start).Round(time.Millisecond))
		}
		if debugSlotMove {
			b.Logf("unlock took %v; waiters done at %v", unlocked.Round(time.Millisecond), times)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "done-ms")
}
