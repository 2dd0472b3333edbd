package goredis_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// On a cluster, Own's driver sends keyed commands on its own connections
// (it is CtxBound), and follows the redirects of a slot that moves: a
// MOVED (the slot has moved; go-redis's map does not know yet) and an
// ASK (the slot is being migrated and the key has gone). A driver that
// did not follow them would return the redirect as the reply.
func TestOwnClusterFollowsRedirects(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartClusterT(t, redistest.ClusterOptions{ReplicasPerMaster: -1})
	rdb := c.Client()
	d := goredis.Own(rdb)
	t.Cleanup(func() { _ = d.Close(); _ = rdb.Close() })
	if info := d.Info(); !info.CtxBound || !info.AutoPipeline || info.ResendAfter != 0 {
		t.Fatalf("Info() = %+v: not on dlock's own connections", info)
	}
	get := func(key string) driver.Reply {
		return d.Do(ctx, driver.Command{Args: []any{"GET", key}, FirstKey: 1, Keys: 1})
	}
	set := func(key, v string) {
		t.Helper()
		if r := d.Do(ctx, driver.Command{Args: []any{"SET", key, v}, FirstKey: 1, Keys: 1}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	other := func(key string) *redistest.Server {
		t.Helper()
		m, err := c.MasterOf(key)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range masters {
			if x != m {
				return x
			}
		}
		t.Fatal("one master")
		return nil
	}

	t.Run("MOVED", func(t *testing.T) {
		set("moved", "1")
		if _, err := c.MigrateSlot("moved", other("moved")); err != nil {
			t.Fatal(err)
		}
		if r := get("moved"); r.Err != nil || r.Val != "1" {
			t.Fatalf("GET after the slot moved: %v, %v", r.Val, r.Err)
		}
		// and a pipeline's command too
		set("moved2{moved}", "2")
		rs := d.Pipeline(ctx, []driver.Command{{Args: []any{"GET", "moved2{moved}"}, FirstKey: 1, Keys: 1}})
		if rs[0].Err != nil || rs[0].Val != "2" {
			t.Fatalf("pipelined GET: %v, %v", rs[0].Val, rs[0].Err)
		}
	})

	t.Run("ASK", func(t *testing.T) {
		const key = "asked"
		set(key, "1")
		from, err := c.MasterOf(key)
		if err != nil {
			t.Fatal(err)
		}
		to := other(key)
		admin := func(s *redistest.Server) *redis.Client {
			cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
			t.Cleanup(func() { _ = cl.Close() })
			return cl
		}
		src, dst := admin(from), admin(to)
		srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
		slot := redistest.KeySlot(key)
		// half a migration: the key has gone to the importing master, the
		// slot is still the source's, which answers ASK for it
		for _, step := range []struct {
			cl   *redis.Client
			args []any
		}{
			{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
			{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
			{src, []any{"MIGRATE", "127.0.0.1", to.Port(), key, 0, 2000}},
		} {
			if err := step.cl.Do(ctx, step.args...).Err(); err != nil {
				t.Fatal(step.args, err)
			}
		}
		if err := src.Get(ctx, key).Err(); err == nil || err.Error()[:3] != "ASK" {
			t.Fatalf("the source answers %v, not ASK", err)
		}
		if r := get(key); r.Err != nil || r.Val != "1" {
			t.Fatalf("GET of a key migrated away: %v, %v", r.Val, r.Err)
		}
	})
}

// Before go-redis has a cluster's slot map, asking it where a key lives
// reads from a seed node, bounded only by go-redis's own timeouts; a call
// on dlock's own connections still returns when its ctx ends. (A seed
// that accepts and never answers; a ReadTimeout of 3 s.)
func TestOwnClusterBoundWhileTheSlotMapLoads(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{blackHole(t)},
		ReadTimeout: 3 * time.Second, MaxRetries: -1, MaxRedirects: -1})
	d := goredis.Own(rdb)
	t.Cleanup(func() { _ = d.Close(); _ = rdb.Close() })
	if !d.Info().CtxBound {
		t.Fatal("not CtxBound")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r := d.Do(ctx, driver.Command{Args: []any{"GET", "k"}, FirstKey: 1, Keys: 1})
	if !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, %v; want the ctx's deadline", r.Val, r.Err)
	}
}

// blackHole is the address of a server that accepts connections and never
// answers, closed when t ends (its connections too, after the clients'
// Cleanups: those registered later run first).
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}
