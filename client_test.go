package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Close releases what the Client still holds, so another client gets it at
// once, not after the TTL.
func TestCloseReleasesHeldLocks(t *testing.T) {
	ctx := context.Background()
	for _, kind := range allKinds {
		t.Run(kind.name, func(t *testing.T) {
			rdb := newRedis(t, srv)
			a, err := dlock.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			b := client(t)
			name := lockName(t)
			l, err := kind.lock(a, name, ctx, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(l.Err(), dlock.ErrClosed) {
				t.Fatalf("after Close, Err = %v; want ErrClosed", l.Err())
			}
			l2, err := kind.probe(b, name, ctx)
			if err != nil {
				t.Fatalf("after the holder's Client closed, the lock is still held: %v", err)
			}
			unlock(t, l2)
		})
	}
}
