package redisfence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
// (so that volatile-* policies may evict them too), until key is gone or
// 64 MiB were written (eight times the server's memory); it returns
// whether key went. It asks with TYPE, which leaves the key's LRU clock
// alone: EXISTS touches it, so a key asked after every batch stayed the
// most recently used and an LRU policy evicted everything else first
// (TestEvictionRiskWarnsNamingTheRisk failed once in ./test.sh so).
//
// The server's LRU clock counts whole seconds: a key last touched in the
// same second as the cache's keys is no older than they are to it, and
// an LRU policy may then never pick it (a run that went fast enough
// failed so once). So the filling starts only once the server's clock has
// moved on by more than a second since the call: key is then older than
// every key of the cache.
func fillCache(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	ctx := context.Background()
	start, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(start) > 1100*time.Millisecond {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the server's clock, the signal here
	}
	gone := func() bool { return rdb.Type(ctx, key).Val() == "none" }
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
			evicted := fillCache(t, rdb, g.Record(res))
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

// The check of the server's policy is made once per client, not per
// write: writes from eight goroutines at once, from the first on, send
// one INFO between them (those that come while it is under way wait for
// it), and so do Guards made one per write of the same client.
func TestEvictionCheckIsCached(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := newRedis(t, s)
	g := redisfence.New(rdb)
	before := cmdCalls(t, rdb, "info")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := g.Set(ctx, token(1), name(t), fmt.Sprintf("{%s}:%d:%d", name(t), w, i), "x", 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// and a Guard made for each write, of the same client
	for i := range 50 {
		if err := redisfence.New(rdb).Set(ctx, token(1), name(t), fmt.Sprintf("{%s}:new:%d", name(t), i), "x", 0); err != nil {
			t.Fatal(err)
		}
	}
	// the second read counts the first
	if n := cmdCalls(t, rdb, "info") - before - 1; n != 1 {
		t.Errorf("200 writes of one Guard, and 50 of a Guard each, of one client sent INFO %d times; want once", n)
	}
}

// A policy changed at run time is seen within WithPolicyRecheck: a
// server set to allkeys-lru after a Guard's first write is refused at
// the first write once the pass is that old, and accepted again once it
// is set back (a refusal is not kept).
func TestEvictionPolicyChangedAtRunTime(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := newRedis(t, s)
	const recheck = 200 * time.Millisecond
	g := redisfence.New(rdb, redisfence.WithPolicyRecheck(recheck))
	res, key := name(t), "{"+name(t)+"}:data"
	if err := g.Set(ctx, token(6), res, key, "six", 0); err != nil {
		t.Fatal(err)
	}
	passed := time.Now() // the pass was made before this
	if err := rdb.ConfigSet(ctx, "maxmemory", "8mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	// the thing under test is time passing: no event to wait for
	time.Sleep(time.Until(passed.Add(recheck)))
	if err := g.Set(ctx, token(6), res, key, "six again", 0); !errors.Is(err, dlock.ErrEvictionPolicy) {
		t.Errorf("a write %v after the policy became allkeys-lru: %v; want an error matching ErrEvictionPolicy", recheck, err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, token(6), res, key, "six, once more", 0); err != nil {
		t.Errorf("a write after the policy went back to noeviction: %v", err)
	}
}

// WithEvictionRisk lets a Guard write on an evicting server and logs one
// warning (not one a write) that names the risk; the risk is real: under
// volatile-lru a cache filling the server evicts the receipts of guarded
// writes (they carry a TTL), which is why a Guard refuses such a server
// by default.
func TestEvictionRiskWarnsNamingTheRisk(t *testing.T) {
	ctx := context.Background()
	s := evictingServer(t, "volatile-lru")
	rdb := newRedis(t, s)
	var logs bytes.Buffer
	g := redisfence.New(rdb, redisfence.WithEvictionRisk(), redisfence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	res, key := name(t), "{"+name(t)+"}:data"
	for range 20 {
		if err := g.Set(ctx, token(6), res, key, "six", 0); err != nil {
			t.Fatal(err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings; want one:\n%s", n, out)
	}
	for _, w := range []string{"volatile-lru", "stale", "WithEvictionRisk"} {
		if !strings.Contains(out, w) {
			t.Errorf("the warning does not say %q:\n%s", w, out)
		}
	}
	receipts := g.Record(res) + ":w"
	if rdb.Exists(ctx, receipts).Val() != 1 {
		t.Fatalf("no receipts at %s", receipts)
	}
	if !fillCache(t, rdb, receipts) {
		t.Errorf("under volatile-lru the cache never evicted the receipts")
	}
	if f, err := g.Fence(ctx, res); err != nil || f != 6 {
		t.Errorf("under volatile-lru the record: %d, %v; want 6 (it has no TTL)", f, err)
	}
}

// On a cluster a Guard reads every master's policy (a Guard writes to
// every slot, as a Client locks in every slot): one master set to
// allkeys-lru, not the one of the resource's slot, and the Guard refuses
// the cluster, naming that master; set back, it writes.
func TestGuardRefusesAClusterWithOneEvictingMaster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{ReplicasPerMaster: -1})
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	res, key := name(t), "{"+name(t)+"}:data"
	g := redisfence.New(rdb)
	home, err := rdb.MasterForKey(ctx, g.Record(res))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters()
	if err != nil {
		t.Fatal(err)
	}
	var other *redis.Client
	for _, m := range masters {
		if m.Addr() != home.Options().Addr {
			other = newRedis(t, m)
			break
		}
	}
	if err := other.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	err = g.Set(ctx, token(3), res, key, "three", 0)
	if !errors.Is(err, dlock.ErrEvictionPolicy) || !strings.Contains(err.Error(), other.Options().Addr) {
		t.Errorf("a cluster with %s on allkeys-lru: %v; want an error matching ErrEvictionPolicy naming it", other.Options().Addr, err)
	}
	if err := other.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, token(3), res, key, "three", 0); err != nil {
		t.Errorf("the cluster set back to noeviction: %v", err)
	}
}

// The check is made within each write's ctx: on a stopped server, eight
// writes of a Guard that has not checked yet, each with a 200 ms ctx,
// return (with their ctx's error), whether they make the check or wait
// for another's; once the server runs again, the next write checks and
// writes (a check that could not be made is not kept).
func TestEvictionCheckWithinTheCtx(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil { // a connection, ready
		t.Fatal(err)
	}
	g := redisfence.New(rdb)
	res := name(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = s.Resume()
		}
	}()
	errs := make([]error, 8)
	took := make([]time.Duration, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			errs[i] = g.Set(ctx, token(1), res, fmt.Sprintf("{%s}:%d", res, i), "x", 0)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || took[i] > 2*time.Second {
			t.Errorf("write %d on a stopped server: %v after %v; want its ctx's error, within about 200ms", i, err, took[i])
		}
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if err := g.Set(context.Background(), token(1), res, "{"+res+"}:after", "x", 0); err != nil {
		t.Errorf("a write once the server runs again: %v", err)
	}
}

// A user that may not run INFO (an ACL; a proxy that forbids it) leaves
// the policy unknown: the Guard writes, and logs one warning that says
// so and what to make sure of.
func TestEvictionCheckRefusedInfoWarns(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	admin := newRedis(t, s)
	if err := admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := s.Client(func(o *redis.Options) { o.Username, o.Password = "noinfo", "pw" })
	t.Cleanup(func() { _ = rdb.Close() })
	var logs bytes.Buffer
	g := redisfence.New(rdb, redisfence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), redisfence.WithPolicyRecheck(time.Nanosecond))
	res := name(t)
	for i := range 3 {
		if err := g.Set(ctx, token(1), res, fmt.Sprintf("{%s}:%d", res, i), "x", 0); err != nil {
			t.Fatalf("write %d as a user refused INFO: %v", i, err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "noeviction") {
		t.Errorf("%d warnings; want one naming noeviction:\n%s", n, out)
	}
}
