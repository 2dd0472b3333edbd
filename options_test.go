package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// An option is refused where it means nothing, not ignored.
func TestOptionsRefusedWhereMeaningless(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	name := lockName(t)
	for _, tc := range []struct {
		what string
		try  func() error
	}{
		{"Mutex WithReaderPreference", func() error { _, err := c.Mutex(name).TryLock(ctx, dlock.WithReaderPreference()); return err }},
		{"FairMutex WithReaderPreference", func() error { _, err := c.FairMutex(name).TryLock(ctx, dlock.WithReaderPreference()); return err }},
		{"Semaphore WithReaderPreference", func() error {
			_, err := c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithReaderPreference())
			return err
		}},
		{"New WithNodeTimeout", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithNodeTimeout(time.Second)); return err }},
		{"New WithRetryJitter", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithRetryJitter(time.Second)); return err }},
	} {
		if err := tc.try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", tc.what, err)
		}
	}
	// Where they mean something they are taken.
	l, err := c.RWMutex(name, dlock.WithReaderPreference(), dlock.WithQueueTTL(time.Second)).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, l)
	for _, try := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex(name, dlock.WithQueueTTL(time.Second)).TryLock(ctx) },
		func() (*dlock.Lease, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithQueueTTL(time.Second))
		},
	} {
		l, err := try()
		if err != nil {
			t.Fatal(err)
		}
		unlock(t, l)
	}
}
