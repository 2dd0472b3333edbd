package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Counter is a lost-update detector: a counter in Redis that is incremented
// with a non-atomic read-modify-write. Concurrent increments that are not
// mutually excluded overwrite each other, so after n increments under a
// correct lock Value returns exactly n, and a smaller value proves that two
// critical sections interleaved.
type Counter struct {
	client redis.Cmdable
	key    string
}

// NewCounter returns a counter stored under key.
func NewCounter(client redis.Cmdable, key string) *Counter {
	return &Counter{client: client, key: key}
}

// Increment reads the counter (a missing key counts as 0), sleeps for pause
// to widen the race window, and writes back the value plus one. It must
// only be called while holding the lock under test.
func (c *Counter) Increment(ctx context.Context, pause time.Duration) error {
	v, err := c.Value(ctx)
	if err != nil {
		return err
	}
	if pause > 0 {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if err := c.client.Set(ctx, c.key, v+1, 0).Err(); err != nil {
		return fmt.Errorf("history: counter %q: SET: %w", c.key, err)
	}
	return nil
}

// Value returns the current counter value; a missing key counts as 0.
func (c *Counter) Value(ctx context.Context) (int64, error) {
	v, err := c.client.Get(ctx, c.key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("history: counter %q: GET: %w", c.key, err)
	}
	return v, nil
}
