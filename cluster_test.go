package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// clusterClient returns a go-redis cluster client of cl, closed when the
// test ends.
func clusterClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := cl.Client(func(o *redis.ClusterOptions) { o.MaxRedirects = 8 })
	t.Cleanup(func() {
		_ = rdb.Close()
		envdriver.Forget(rdb)
	})
	return rdb
}

func TestClusterEveryPrimitiveAcrossSlots(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	a := newClient(t, clusterClient(t, cl))
	b := newClient(t, clusterClient(t, cl))
	base := lockName(t)
	slots := map[int]bool{}
	for i := range 40 {
		name := fmt.Sprintf("%s/%d", base, i)
		slots[redistest.KeySlot(keysOf(name).Lock)] = true
		l := mustLock(t, a.Mutex(name), ctx)
		if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("%s: second owner on a cluster: %v", name, err)
		}
		inner := mustLock(t, a.Mutex(name), l.Context(ctx))
		unlock(t, inner)
		unlock(t, l)
	}
	if len(slots) < 30 {
		t.Fatalf("the names fell in %d slots only", len(slots))
	}
	// The other primitives: their scripts touch several keys of one slot.
	f := mustLock(t, a.FairMutex(base+"/fair"), ctx)
	unlock(t, f)
	r := mustLock(t, a.RWMutex(base+"/rw").RLocker(), ctx)
	if _, err := b.RWMutex(base + "/rw").TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("writer among readers on a cluster: %v", err)
	}
	unlock(t, r)
	p, err := a.Semaphore(base+"/sem", 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, p)
	l := a.Latch(base + "/latch")
	if _, err := l.TrySetCount(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	set, err := dlock.LockAll(ctx, a.Mutex(base+"/x"), a.Mutex(base+"/y"))
	if err != nil {
		t.Fatalf("LockAll across slots: %v", err)
	}
	if err := set.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// An election: its value, its hand-off and its observers' channel in
	// the slot of its keys.
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := b.Election(base + "/elect").Observe(octx)
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("election's first state %+v", info)
	}
	ld := campaign(t, a.Election(base+"/elect"), "a")
	if info := next(t, obs); info.Term != ld.Term() || info.Value != "a" {
		t.Fatalf("elected on a cluster: %+v", info)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("resigned on a cluster: %+v", info)
	}
	stop()

	// Wake-ups by sharded pub/sub, from the node of the lock's slot.
	holder := mustLock(t, a.Mutex(base+"/wake"), ctx) // 30 s TTL
	checkWokenByRelease(t, b.Mutex(base+"/wake"), func() { unlock(t, holder) })

	// Exclusion under contention: no update lost.
	checkLostUpdates(t, clusterClient(t, cl), "{"+base+"}:counter", 6, 10, func(i int) dlock.Locker {
		return []*dlock.Client{a, b}[i%2].Mutex(base + "/contended")
	})

	// Renewals of leases on different nodes, pipelined per node.
	var leases []*dlock.Lease
	for i := range 6 {
		leases = append(leases, mustLock(t, a.Mutex(fmt.Sprintf("%s/renew/%d", base, i)), ctx, dlock.WithTTL(renewTTL)))
	}
	time.Sleep(2 * renewTTL)
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("renewed lease on a cluster lost: %v", err)
		}
		unlock(t, l)
	}
}

func TestClusterExclusionAndFailover(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	rdb := clusterClient(t, cl)
	name := lockName(t)
	counter := "{" + name + "}:counter"
	const workers = 8
	var wg sync.WaitGroup
	var acquired, errs atomic.Int64
	stop := make(chan struct{})
	for i := range workers {
		// Made here: t.Fatal must not run in a goroutine of the test's.
		m := newClient(t, clusterClient(t, cl)).Mutex(name, dlock.WithTTL(2*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := m.Lock(lctx)
				cancel()
				if err != nil {
					if errs.Add(1) <= 3 {
						t.Logf("Lock during a failover: %v", err)
					}
					continue
				}
				v, _ := rdb.Get(ctx, counter).Int64()
				time.Sleep(200 * time.Microsecond)
				if rdb.Set(ctx, counter, v+1, 0).Err() == nil {
					acquired.Add(1)
				}
				_ = l.Unlock(ctx)
				_ = i
			}
		}()
	}
	waitAcq := func(n int64, what string) {
		t.Helper()
		want := acquired.Load() + n
		waitFor(t, what, func() bool { return acquired.Load() >= want })
	}
	waitAcq(50, "locks before the failover")

	// A manual failover of the lock's master, under load.
	master, err := cl.MasterOf(keysOf(name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := cl.ReplicaOf(master)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Failover(replica); err != nil {
		t.Fatal(err)
	}
	waitAcq(50, "locks after CLUSTER FAILOVER")

	// kill -9 of the lock's (new) master, under load.
	master, err = cl.MasterOf(keysOf(name).Lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitFailoverAfterKill(master, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The test's own client for the counter: go-redis does not refresh its
	// slot map on connection errors (dlock's clients do it themselves).
	rdb.ReloadState(ctx)
	waitAcq(50, "locks after a master was killed")
	close(stop)
	wg.Wait()
	// No update lost while everything went on: each counted acquisition
	// incremented the counter under the lock. (A failover can lose a lock
	// the old master granted and had not replicated; with this load and
	// replication on loopback it did not happen here, and the README says
	// it can.)
	if v, _ := rdb.Get(ctx, counter).Int64(); v != acquired.Load() {
		t.Logf("counter %d after %d locked increments (a failover lost a lock or a write)", v, acquired.Load())
	}
	t.Logf("%d acquisitions, %d failed Locks during the failovers", acquired.Load(), errs.Load())
}

// A Client waiting on many locks of a cluster keeps one pub/sub connection
// per master at most, and each waiter is still woken by its release.
func TestClusterPubSubConnectionsBounded(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	rdb := clusterClient(t, cl)
	a := newClient(t, clusterClient(t, cl))
	b := newClient(t, rdb)
	base := lockName(t)
	const n = 30
	holds := make([]*dlock.Lease, n)
	for i := range n {
		holds[i] = mustLock(t, a.Mutex(fmt.Sprintf("%s/%d", base, i)), ctx)
	}
	got := make(chan error, n)
	for i := range n {
		m := b.Mutex(fmt.Sprintf("%s/%d", base, i))
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // far below the 30 s TTL
			defer cancel()
			l, err := m.Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	for i := range n {
		queue := keysOf(fmt.Sprintf("%s/%d", base, i)).Lock + ":queue"
		waitFor(t, "every waiter registered", func() bool { return rdb.ZCard(ctx, queue).Val() == 1 })
	}
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	conns := 0
	for _, m := range masters {
		list, err := newRedis(t, m).ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, "cmd=ssubscribe") || strings.Contains(line, "cmd=sunsubscribe") {
				conns++
			}
		}
	}
	if conns == 0 || conns > len(masters) {
		t.Fatalf("%d pub/sub connections for %d waited locks on %d masters; want 1 to %d", conns, n, len(masters), len(masters))
	}
	for _, l := range holds {
		unlock(t, l)
	}
	for range n {
		if err := <-got; err != nil {
			t.Fatalf("waiter after the release: %v", err)
		}
	}
}

// Locks walks every master of a cluster.
func TestClusterLocksScansEveryMaster(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	c := newClient(t, clusterClient(t, cl))
	base := lockName(t)
	const n = 20
	for i := range n {
		mustLock(t, c.Mutex(fmt.Sprintf("%s/%d", base, i)), ctx)
	}
	ls, err := c.Locks(ctx, base+"/*")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, l := range ls {
		if l.Held && l.Kind == dlock.KindMutex {
			held++
		}
	}
	if held != n {
		t.Fatalf("Locks found %d held mutexes; want %d", held, n)
	}
}

// When a locked Mutex's slot moves to another master while Clients wait
// on it, the server ends their wake-up subscriptions there; each Client's
// hub subscribes again where the slot lives now, so the releases, which
// are published there, wake them. Without that they sleep to their bound
// (a third of a 30 s QueueTTL here) and the subscriptions never come back.
func TestClusterWaitersFollowAMovedSlot(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	name := lockName(t)
	key := keysOf(name).Lock
	opts := []dlock.LockOption{dlock.WithTTL(30 * time.Second), dlock.WithQueueTTL(30 * time.Second)}
	holder := mustLock(t, newClient(t, clusterClient(t, cl)).Mutex(name, opts...), ctx)
	const waiters = 4
	got := make(chan error, waiters)
	for range waiters {
		m := newClient(t, clusterClient(t, cl)).Mutex(name, opts...)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 8*time.Second) // below the waiters' 10 s bound
			defer cancel()
			l, err := m.Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	from, err := cl.MasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	channels := func(s *redistest.Server) int {
		n, _ := newRedis(t, s).Do(ctx, "PUBSUB", "SHARDCHANNELS", key+":wake:*").Slice()
		return len(n)
	}
	waitFor(t, "every waiter subscribed on the slot's master", func() bool { return channels(from) == waiters })
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if _, err := cl.MigrateSlot(key, to); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every waiter subscribed again on the slot's new master", func() bool { return channels(to) == waiters })
	unlock(t, holder)
	for range waiters {
		if err := <-got; err != nil {
			t.Fatalf("waiter after the move and the release: %v", err)
		}
	}
}

// A Lock whose ctx is live rides out a failover of its lock's master: the
// cluster answers with a gone node, CLUSTERDOWN or MOVED for a while, and
// the waiters keep waiting (and refresh their slot maps) instead of
// returning those errors; each gets the lock once the new master serves
// the slot and the holder has let go (its Unlock rides it out too). Two
// failovers: the master killed; and a graceful CLUSTER FAILOVER with
// WithReplicaSync, whose grants go on a connection of the key's node and
// met a raw MOVED.
func TestClusterWaitersRideOutAFailover(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	t.Run("Killed", func(t *testing.T) {
		redistest.Long(t) // kill -9 and the node timeout (kill -9 under load: TestClusterExclusionAndFailover, every run)
		rideOutFailover(t, true)
	})
	t.Run("GracefulWithReplicaSync", func(t *testing.T) { rideOutFailover(t, false, dlock.WithReplicaSync(1, time.Second)) })
}

func rideOutFailover(t *testing.T, kill bool, copts ...dlock.Option) {
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	name := lockName(t)
	key := keysOf(name).Lock
	opts := []dlock.LockOption{dlock.WithTTL(2 * time.Second)}
	// The holder's lease outlives the failover (about 2 s), so it still
	// holds on the new master when it lets go.
	holder := mustLock(t, newClient(t, clusterClient(t, cl), copts...).Mutex(name, dlock.WithTTL(20*time.Second)), ctx)
	master, err := cl.MasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, cl, master, key)
	const waiters = 4
	got := make(chan error, waiters)
	rdb := clusterClient(t, cl)
	for range waiters {
		m := newClient(t, clusterClient(t, cl), copts...).Mutex(name, opts...)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := m.Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	waitFor(t, "every waiter queued", func() bool { return rdb.ZCard(ctx, key+":queue").Val() == waiters })
	if kill {
		if err := master.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitFailoverAfterKill(master, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	} else {
		replica, err := cl.ReplicaOf(master)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Failover(replica); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Errorf("the holder's Unlock after the failover: %v", err)
	}
	for range waiters {
		if err := <-got; err != nil {
			t.Errorf("a waiting Lock with a live ctx returned during a failover: %v", err)
		}
	}
}

// waitReplicated waits until master's replica has key.
func waitReplicated(t *testing.T, cl *redistest.Cluster, master *redistest.Server, key string) {
	t.Helper()
	replica, err := cl.ReplicaOf(master)
	if err != nil {
		t.Fatal(err)
	}
	r := newRedis(t, replica)
	waitFor(t, "the lock replicated", func() bool {
		var exists *redis.IntCmd
		_, _ = r.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			p.Do(context.Background(), "READONLY") // a cluster replica answers reads then
			exists = p.Exists(context.Background(), key)
			return nil
		})
		return exists.Val() == 1
	})
}
