package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// evictingServer starts a redis-server of 8 MB under policy.
func evictingServer(t *testing.T, policy string) *redistest.Server {
	t.Helper()
	return redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", policy}})
}

// fillCache writes a cache into rdb's server, 16 KiB values with a TTL
// (so that volatile-* policies may evict them too), until gone reports
// true or 64 MiB were written (eight times the server's memory); it
// returns whether gone did.
func fillCache(t *testing.T, rdb *redis.Client, gone func() bool) bool {
	t.Helper()
	ctx := context.Background()
	value := strings.Repeat("c", 16<<10)
	for batch := range 64 {
		if gone() {
			return true
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range 64 {
				p.Set(ctx, fmt.Sprintf("cache:%d:%d", batch, i), value, time.Hour)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("filling the cache: %v", err)
		}
	}
	return gone()
}

// A Guard refuses a server that may evict its records, as a Client
// refuses it: with maxmemory and an allkeys policy a cache filling the
// server evicts the record, and a stale writer's write would then be
// accepted (the record goes back down); under volatile-* the receipts
// (which carry TTLs) go. Every write, Tx's too, fails with an error
// matching dlock.ErrEvictionPolicy, and the stale write, after the cache
// filled the server, is refused and not in the store.
func TestGuardRefusesAnEvictingServer(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "allkeys-random", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			ctx := context.Background()
			s := evictingServer(t, policy)
			rdb := newRedis(t, s)
			g := redisfence.New(rdb)
			res, key := name(t), "{"+name(t)+"}:data"
			newer := g.Set(ctx, token(6), res, key, "six", 0)
			if newer != nil && !errors.Is(newer, dlock.ErrEvictionPolicy) {
				t.Fatalf("the newer owner's write: %v", newer)
			}
			if newer == nil {
				t.Errorf("the guard accepted a write on a server whose maxmemory-policy is %s; want an error matching ErrEvictionPolicy", policy)
			} else if !strings.Contains(newer.Error(), policy) {
				t.Errorf("the refusal does not name the policy %s: %v", policy, newer)
			}
			err := g.Tx(ctx, token(6), res, []string{key}, func(tx *redis.Tx, pipe redis.Pipeliner) error {
				pipe.Set(ctx, key, "six by Tx", 0)
				return nil
			})
			if !errors.Is(err, dlock.ErrEvictionPolicy) {
				t.Errorf("Tx on %s: %v; want an error matching ErrEvictionPolicy", policy, err)
			}
			evicted := fillCache(t, rdb, func() bool { return rdb.Exists(ctx, g.Record(res)).Val() == 0 })
			t.Logf("%s: the newer write: %v; the record absent after the cache: %v", policy, newer, evicted)
			stale := g.Set(ctx, token(5), res, key, "five", 0)
			if !errors.Is(stale, dlock.ErrEvictionPolicy) && !errors.Is(stale, fence.ErrStale) {
				t.Errorf("the stale write after the cache filled the server: %v; want it refused", stale)
			}
			if v, _ := rdb.Get(ctx, key).Result(); v == "five" {
				t.Errorf("the stale write is in the store")
			}
		})
	}
}
