package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/redis/go-redis/v9"
)

func ExampleGuard_Set() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("example-fence"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	guard := redisfence.New(rdb, redisfence.WithPrefix("example-fence:fenced"))

	lease, err := c.Mutex("orders/42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(ctx)

	// The write carries the lease's fence: Redis refuses it if a newer
	// owner of orders/42 has written since (this holder was paused past
	// its lease, say). On a cluster the key would carry {orders/42}.
	err = guard.Set(ctx, lease, "orders/42", "{orders/42}:status", "shipped", 0)
	switch {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("too late: a newer owner has written")
	case err != nil:
		panic(err)
	default:
		fmt.Println("written")
	}
	// Output: written
}
