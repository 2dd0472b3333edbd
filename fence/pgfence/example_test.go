package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func ExampleGuard_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix("example-pgfence"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	guard, err := pgfence.New(ctx, pool) // creates its table, dlock_fences, if missing
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text)"); err != nil {
		panic(err)
	}

	lease, err := c.Mutex("orders/42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(ctx)

	// The transaction commits only if no newer owner of orders/42 has
	// committed one since (this holder was paused past its lease, say).
	err = guard.Do(ctx, lease, "orders/42", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO orders VALUES (42, 'shipped') ON CONFLICT (id) DO UPDATE SET status = 'shipped'")
		return err
	})
	switch {
	case errors.Is(err, fence.ErrStale):
		fmt.Println("too late: a newer owner has written")
	case err != nil:
		panic(err)
	default:
		fmt.Println("committed")
	}
	// Output: committed
}
