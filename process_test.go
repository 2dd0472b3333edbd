package dlock_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
)

func TestExclusionAcrossProcesses(t *testing.T) {
	const procs, goroutines, rounds = 4, 8, 12
	name := lockName(t)
	runContenders(t, name, procs, goroutines, rounds, addrEnv+"="+srv.Addr())
	v, err := history.NewCounter(newRedis(t, srv), name+":counter").Value(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v != procs*goroutines*rounds {
		t.Fatalf("counter %d after %d locked increments: updates lost", v, procs*goroutines*rounds)
	}
}

func TestHolderCrashFreesWithinTTL(t *testing.T) {
	const ttl = 500 * time.Millisecond
	name := lockName(t)
	h := startHelper(t, "hold", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"="+ttl.String())
	first := fenceOf(t, h.expect(t, "locked", 10*time.Second))
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// No release will be published: the waiter's wait is bounded by the
	// dead holder's remaining lease.
	ctx, cancel := context.WithTimeout(context.Background(), ttl+2*time.Second)
	defer cancel()
	l := mustLock(t, client(t).Mutex(name), ctx)
	if l.Fence() <= first {
		t.Fatalf("fence %d after the crashed holder's %d", l.Fence(), first)
	}
	unlock(t, l)
}

func TestHolderPauseIsToldAndFenced(t *testing.T) {
	const ttl = 300 * time.Millisecond
	ctx := context.Background()
	name := lockName(t)
	h := startHelper(t, "hold", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"="+ttl.String())
	paused := fenceOf(t, h.expect(t, "locked", 10*time.Second))
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The paused holder cannot renew: the lock expires and we take it.
	wctx, cancel := context.WithTimeout(ctx, ttl+5*time.Second)
	defer cancel()
	l := mustLock(t, client(t).Mutex(name), wctx)
	if l.Fence() <= paused {
		t.Fatalf("new holder's fence %d is not above the paused holder's %d", l.Fence(), paused)
	}
	rdb := newRedis(t, srv)
	store := name + ":store"
	if ok, err := fencedSet.Run(ctx, rdb, []string{store}, l.Fence()).Int(); err != nil || ok != 1 {
		t.Fatalf("new holder's fenced write: %v %v", ok, err)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Resumed, the old holder must learn it lost the lease; any write it
	// had already started must have been rejected by the fence.
	for {
		line := <-h.lines
		if line == "rejected" {
			continue
		}
		if line == "" || line[:4] != "lost" {
			t.Fatalf("resumed holder said %q, want lost", line)
		}
		break
	}
	if got, _ := rdb.Get(ctx, store).Int64(); got != l.Fence() {
		t.Fatalf("store holds fence %d, want the new holder's %d: a stale write got through", got, l.Fence())
	}
	if err := l.Err(); err != nil {
		t.Fatalf("new holder's lease: %v", err)
	}
	unlock(t, l)
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
}
