package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// token is a fence.Token of a fixed fence.
type token int64

func (t token) Fence() int64 { return int64(t) }

var fenceWriters atomic.Int64

// BenchmarkFencedWrite is the cost of a write through redisfence's Guard
// against the same write without it, on one server, 16 goroutines of one
// client, each on a resource and key of its own: plain SET, Guard.Set (a
// script), and Guard.Tx (WATCH, GET, MULTI/EXEC) against the same
// WATCH/MULTI/EXEC without the check. Issue 27's target: a fenced write
// <= 1.2x the unfenced one.
func BenchmarkFencedWrite(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr(b), PoolSize: 32})
	defer rdb.Close()
	g := redisfence.New(rdb)
	ctx := context.Background()
	cases := []struct {
		name  string
		write func(res, key string, f int64) error
	}{
		{"set", func(_, key string, _ int64) error { return rdb.Set(ctx, key, "v", 0).Err() }},
		{"guard-set", func(res, key string, f int64) error { return g.Set(ctx, token(f), res, key, "v", 0) }},
		// one owner writing many times: the record is not moved
		{"guard-set-same-fence", func(res, key string, _ int64) error { return g.Set(ctx, token(2), res, key, "v", 0) }},
		{"tx", func(_, key string, _ int64) error {
			return rdb.Watch(ctx, func(tx *redis.Tx) error {
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, key, "v", 0).Err() })
				return err
			}, key)
		}},
		{"guard-tx", func(res, key string, f int64) error {
			return g.Tx(ctx, token(f), res, []string{key}, func(_ *redis.Tx, p redis.Pipeliner) error {
				return p.Set(ctx, key, "v", 0).Err()
			})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.FormatInt(fenceWriters.Add(1), 10) // new each run: b.N grows
				res, key := "bench-fence/"+c.name+"/"+id, "bench-fence:"+c.name+":"+id
				f := int64(1)
				for pb.Next() {
					f++ // a new owner each write: the record moves too
					if err := c.write(res, key, f); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkFencedTxPG is the cost of a transaction through pgfence's
// Guard against the same transaction without it, on one PostgreSQL
// (internal/pgtest: fsync off), 16 goroutines of one pool, each on a row
// and resource of its own: BEGIN, an upsert of the row, COMMIT, against
// Guard.Do of the same (which first raises the resource's fence row).
// Issue 27's target: <= 1.3x.
func BenchmarkFencedTxPG(b *testing.B) {
	pg, err := pgtest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer pg.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.URL()+"&pool_max_conns=32")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE rows (k text PRIMARY KEY, v bigint)"); err != nil {
		b.Fatal(err)
	}
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	upsert := func(tx pgx.Tx, k string, v int64) error {
		_, err := tx.Exec(ctx, "INSERT INTO rows VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", k, v)
		return err
	}
	cases := []struct {
		name  string
		write func(k string, f int64) error
	}{
		{"tx", func(k string, f int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return upsert(tx, k, f) })
		}},
		{"guard-do", func(k string, f int64) error {
			return g.Do(ctx, token(f), k, func(tx pgx.Tx) error { return upsert(tx, k, f) })
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				k := c.name + "/" + strconv.FormatInt(fenceWriters.Add(1), 10)
				f := int64(1)
				for pb.Next() {
					f++
					if err := c.write(k, f); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
