package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestLatch(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	l := client(t).Latch(name)
	if ok, err := l.TrySetCount(ctx, 3, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if ok, _ := l.TrySetCount(ctx, 5, time.Minute); ok {
		t.Fatal("a second TrySetCount replaced the count")
	}
	const waiters = 4
	done := make(chan error, waiters)
	for range waiters {
		latch := client(t).Latch(name) // here: t.Fatal must not run in a goroutine of the test's
		go func() {
			// The latch lives a minute: only the notification is quick.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			done <- latch.Wait(wctx)
		}()
	}
	if n, err := l.CountDownOnce(ctx, "worker-1"); n != 2 || err != nil {
		t.Fatalf("CountDownOnce = %d, %v", n, err)
	}
	if n, _ := l.CountDownOnce(ctx, "worker-1"); n != 2 {
		t.Fatalf("the same id counted twice: %d left", n)
	}
	if n, _ := l.CountDown(ctx); n != 1 {
		t.Fatalf("CountDown left %d", n)
	}
	select {
	case err := <-done:
		t.Fatalf("a waiter returned before zero: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if n, _ := l.CountDown(ctx); n != 0 {
		t.Fatalf("CountDown left %d", n)
	}
	for range waiters {
		if err := <-done; err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
	if n, err := l.Count(ctx); n != 0 || err != nil {
		t.Fatalf("Count after zero = %d, %v", n, err)
	}
	if n, _ := l.CountDown(ctx); n != 0 {
		t.Fatal("counting down an open latch")
	}
	// Bad input.
	if _, err := l.TrySetCount(ctx, 0, time.Minute); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("count 0: %v", err)
	}
	if _, err := l.TrySetCount(ctx, 1, 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("ttl 0: %v", err)
	}
	if _, err := l.CountDownOnce(ctx, ""); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("empty id: %v", err)
	}
	// A cancelled wait.
	_, _ = l.TrySetCount(ctx, 1, time.Minute)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(cctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out Wait: %v", err)
	}
}
