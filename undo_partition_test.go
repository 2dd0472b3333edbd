package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// One node: an acquire's bytes wait in a partition that its connection
// rides out (TCP delivers them once the path heals), while every new
// connection fails meanwhile; the acquire gives up (ctx), and its undo
// cannot reach the server. The partition lasts longer than the undo's
// first tries (the one background try bounded by 2 s that there was); when
// it heals the late acquire runs. The undo must still be trying then, and
// free the lock well within its minute's TTL.
func TestUndoOutlastsAPartition(t *testing.T) {
	onlyGoRedis(t)
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	p, err := faultproxy.New(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name := lockName(t)
	m := c.Mutex(name)
	unlock(t, mustLock(t, m, ctx)) // scripts loaded, fences folded
	admin := newRedis(t, s)

	deliver := p.Stall(nil, nil) // open connections: held, delivered later
	p.RefuseNew(true)            // new ones: refused
	healed := false
	heal := func() {
		if !healed {
			healed = true
			p.RefuseNew(false)
			deliver()
		}
	}
	defer heal()
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.TryLock(tctx, dlock.WithTTL(time.Minute))
	cancel()
	if err == nil {
		t.Fatal("TryLock through a partition succeeded")
	}
	// The partition lasts 3 s: the fault, not a wait for an event.
	time.Sleep(3 * time.Second)
	if n := admin.Exists(ctx, keysOf(name).Lock).Val(); n != 0 {
		t.Fatal("the stalled acquire ran before the partition healed")
	}
	heal()
	lock, dead := keysOf(name).Lock, keysOf(name).Lock+":dead"
	for start := time.Now(); admin.Exists(ctx, lock).Val() != 0 || admin.Exists(ctx, dead).Val() == 0; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("10 s after the partition healed: the lock is held %v more (by nobody), the token buried: %v; want it undone well within its minute's TTL",
				admin.PTTL(ctx, lock).Val(), admin.Exists(ctx, dead).Val() == 1)
		}
	}
}
