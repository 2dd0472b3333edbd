package dlock_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLockUnlock is an uncontended Mutex Lock+Unlock on distinct
// names from 1, 16 and 64 goroutines sharing one Client (one go-redis
// client), as one process of a service does, with a ctx that can end (as
// a user's has). It reports the CPU per operation of this process
// (getrusage) and of the server (INFO cpu): the profile of the hot path
// (go test -bench LockUnlock -cpuprofile). bench/ compares it with the
// anchors.
func BenchmarkLockUnlock(b *testing.B) {
	for _, g := range []int{1, 16, 64} {
		b.Run("g"+strconv.Itoa(g), func(b *testing.B) {
			s := redistest.StartT(b, redistest.Options{})
			rdb := newRedis(b, s)
			c := newClient(b, rdb)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
			cpu0, srv0 := processCPU(), serverCPU(b, rdb)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				m := c.Mutex("bench-" + strconv.FormatInt(next.Add(1), 10))
				for pb.Next() {
					l, err := m.Lock(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/n, "client-µs/op")
			b.ReportMetric(float64((serverCPU(b, rdb)-srv0).Microseconds())/n, "server-µs/op")
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the server's user and system CPU time so far (INFO cpu).
func serverCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
