package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A waiter that is woken but cannot use the wake-up (its ctx ended while
// it tried) passes it on to the next waiter instead of losing it, or that
// waiter sleeps until the holder's whole lease has run out.
func TestWakeUpPassedOnByAWaiterThatGivesUp(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const name, channel = "x", "dlock:{x}:ch"
	ctx := context.Background()

	// X waits first: it is the one a release wakes.
	xctx, xcancel := context.WithCancel(ctx)
	defer xcancel()
	xReady, xDone := make(chan struct{}), make(chan error, 1)
	xChecks := 0
	go func() {
		xDone <- c.waitLoop(xctx, name, channel, "x", 0, time.Hour, func(ctx context.Context) (bool, time.Duration, error) {
			xChecks++
			if xChecks == 1 { // subscribed: still held
				close(xReady)
				return false, time.Hour, nil
			}
			xcancel() // woken, and its ctx ends while it tries
			return false, 0, waitEnded(name, context.Canceled)
		})
	}()
	<-xReady

	yReady, yWoken := make(chan struct{}), make(chan struct{})
	yChecks := 0
	yDone := make(chan error, 1)
	go func() {
		yDone <- c.waitLoop(ctx, name, channel, "y", 0, time.Hour, func(ctx context.Context) (bool, time.Duration, error) {
			yChecks++
			if yChecks == 1 {
				close(yReady)
				return false, time.Hour, nil
			}
			close(yWoken)
			return true, 0, nil
		})
	}()
	<-yReady

	if err := rdb.Publish(ctx, channel, wakeOne).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-xDone; err == nil {
		t.Fatal("X's wait ended without its error")
	}
	select {
	case <-yWoken:
	case <-time.After(5 * time.Second):
		t.Fatal("the wake-up X could not use was lost: Y was never woken")
	}
	if err := <-yDone; err != nil {
		t.Fatal(err)
	}
}
