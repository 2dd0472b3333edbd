package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func failoverClient(t *testing.T, st *redistest.Sentinel) *redis.Client {
	t.Helper()
	rdb := st.FailoverClient()
	envdriver.SentinelOf(rdb, st.MasterName(), st.SentinelAddrs())
	t.Cleanup(func() {
		_ = rdb.Close()
		envdriver.Forget(rdb)
	})
	return rdb
}

// tryUntilAnswer calls TryLock until the failover client reaches a master
// that answers (right after a failover it may still be reconnecting).
func tryUntilAnswer(t *testing.T, m *dlock.Mutex) (*dlock.Lease, error) {
	t.Helper()
	ctx := context.Background()
	var l *dlock.Lease
	var err error
	waitFor(t, "a master that answers", func() bool {
		l, err = m.TryLock(ctx)
		return err == nil || errors.Is(err, dlock.ErrNotObtained)
	})
	return l, err
}

func TestSentinelFailoverKeepsASyncedLock(t *testing.T) {
	ctx := context.Background()
	st := redistest.StartSentinelT(t, redistest.SentinelOptions{})
	c := newClient(t, failoverClient(t, st), dlock.WithReplicaSync(1, time.Second))
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithTTL(3*time.Second))
	if err := st.Failover(); err != nil {
		t.Fatal(err)
	}
	// The replica acknowledged the lock before it was promoted: another
	// owner cannot take it from the new master.
	other := newClient(t, failoverClient(t, st))
	if _, err := tryUntilAnswer(t, other.Mutex(name)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("after the failover the lock was free: %v", err)
	}
	// The holder's renewals reach the new master; its lease lives on.
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("holder after the failover: %v", err)
	}
	unlock(t, l)
}

// With the replication link cut, a lock the master granted never reaches
// the replica: after a failover a second owner takes it (the double grant
// of asynchronous replication). WithReplicaSync refuses the grant instead.
func TestSentinelCutLinkDoubleGrantAndReplicaSync(t *testing.T) {
	ctx := context.Background()
	var proxy *faultproxy.Proxy
	st := redistest.StartSentinelT(t, redistest.SentinelOptions{
		ReplicaUpstream: func(master string) string {
			p, err := faultproxy.New(master)
			if err != nil {
				t.Fatal(err)
			}
			proxy = p
			return p.Addr()
		},
	})
	t.Cleanup(func() { _ = proxy.Close() })
	rdb := failoverClient(t, st)
	synced := newClient(t, rdb, dlock.WithReplicaSync(1, 300*time.Millisecond))
	plain := newClient(t, rdb)
	name := lockName(t)

	proxy.Blackhole(true) // the replica hears nothing more, and acks nothing

	_, err := synced.Mutex(name + "-synced").Lock(ctx)
	if !errors.Is(err, dlock.ErrReplicaSync) {
		t.Fatalf("acquire with the replica cut off: %v; want ErrReplicaSync", err)
	}
	if n := rdb.Exists(ctx, keysOf(name+"-synced").Lock).Val(); n != 0 {
		t.Fatal("the refused acquire left the lock held")
	}

	first := mustLock(t, plain.Mutex(name), ctx, dlock.WithTTL(10*time.Second))
	if err := st.Failover(); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, failoverClient(t, st))
	second, err := tryUntilAnswer(t, other.Mutex(name))
	if err != nil {
		t.Fatalf("expected the double grant to show after the failover, got %v", err)
	}
	t.Logf("double grant after failover: first lease %v (fence %d), second fence %d",
		first.Err(), first.Fence(), second.Fence())
	unlock(t, second)
}
