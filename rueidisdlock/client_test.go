package rueidisdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

func TestNewRejectsANilClient(t *testing.T) {
	if _, err := rueidisdlock.New(nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v; want ErrInvalidArgument", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewDriver(nil) did not panic")
		}
	}()
	rueidisdlock.NewDriver(nil)
}

// A Client on a rueidis client locks, and a waiter is woken by the
// release (over the driver's pub/sub), not by the holder's 30 s TTL.
func TestNewLocksAndWakes(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	newLocks := func() *dlock.Client {
		c, err := rueidisdlock.New(client, dlock.WithPrefix("wake"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder, waiter := newLocks(), newLocks()
	ctx := context.Background()
	l, err := holder.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := waiter.Mutex("m").Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it wait; correct either way
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("the waiter got the lock %v after the release", d)
	}
}
