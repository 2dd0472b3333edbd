package dlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkLockUnlock is an uncontended Mutex Lock+Unlock on distinct
// names, from GOMAXPROCS×-cpu goroutines sharing one Client (one go-redis
// client), as one process of a service does: the profile of the hot path
// (go test -bench LockUnlock -cpuprofile). bench/ compares it with the
// anchors.
func BenchmarkLockUnlock(b *testing.B) {
	s := redistest.StartT(b, redistest.Options{})
	c := newClient(b, newRedis(b, s))
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
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
}
