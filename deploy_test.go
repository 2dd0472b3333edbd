package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Deployments that break locks in silence: an ACL user without pub/sub
// channels, a server that evicts keys.

// aclUser makes an ACL user on s with the given rules and returns a
// client of s logged in as it.
func aclUser(t *testing.T, s *redistest.Server, user string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := newRedis(t, s).Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return newRedis(t, s, func(o *redis.Options) { o.Username, o.Password = user, "pw" })
}

// A user with keys and commands but no channels (Redis 7 grants none by
// default): a release must not report the refused wake-up as its error,
// the waiter must get the lock by polling (not after its place's renewal,
// QueueTTL/3 = 10 s here, past its ctx), and each Client says once what
// grant is missing.
func TestACLWithoutChannels(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	var logA, logB syncBuffer
	cA := newClient(t, aclUser(t, s, "app", "~dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logA, nil))))
	cB := newClient(t, aclUser(t, s, "app", "~dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logB, nil))))
	name := lockName(t)
	for round := range 2 {
		unlockA, lockB := handOver(t, s, cA, cB, name)
		if unlockA != nil {
			t.Errorf("round %d: A's Unlock: %v (the lock was handed on all the same)", round, unlockA)
		}
		if lockB != nil {
			t.Fatalf("round %d: B's Lock after A's release: %v", round, lockB)
		}
	}
	for who, c := range map[string]*dlock.Client{"A": cA, "B": cB} {
		err := c.Health()
		if !errors.Is(err, dlock.ErrPubSubRefused) || !strings.Contains(err.Error(), "&dlock:*") {
			t.Errorf("%s's Health: %v; want an error matching ErrPubSubRefused naming &dlock:*", who, err)
		}
	}
	for who, logs := range map[string]*syncBuffer{"A": &logA, "B": &logB} {
		if n := strings.Count(logs.String(), "&dlock:*"); n != 1 {
			t.Errorf("%s logged the missing grant &dlock:* %d times, want once; logs:\n%s", who, n, logs.String())
		}
	}
}

// A user that may publish on its channels but not subscribe: the probe
// cannot see it (its PUBLISH goes through) and go-redis drops the refused
// SUBSCRIBE, so the waiter's subscription is never confirmed: while it is
// not, the wait polls, and B gets the lock long before its place's
// renewal (QueueTTL/3 = 10 s here, past its ctx).
func TestSubscribeRefusedWaitsPoll(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rules := []string{"~dlock:*", "&dlock:*", "+@all", "-subscribe", "-ssubscribe"}
	cA := newClient(t, aclUser(t, s, "app", rules...))
	cB := newClient(t, aclUser(t, s, "app", rules...))
	unlockA, lockB := handOver(t, s, cA, cB, lockName(t))
	if unlockA != nil {
		t.Fatalf("A's Unlock: %v", unlockA)
	}
	if lockB != nil {
		t.Fatalf("B's Lock, its SUBSCRIBE refused: %v", lockB)
	}
}

// handOver has A take the Mutex name, B wait for it with a 4 s ctx and a
// place renewed only every 10 s (QueueTTL 30 s), then A unlock: it returns
// A's Unlock error and B's Lock (and Unlock) error. Only a release that
// wakes B, or B polling, gets B the lock within its ctx.
func handOver(t *testing.T, s *redistest.Server, cA, cB *dlock.Client, name string) (unlockA, lockB error) {
	t.Helper()
	ctx := context.Background()
	admin := newRedis(t, s)
	queue := keysOf(name).Lock + ":queue"
	la := mustLock(t, cA.Mutex(name), ctx)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		l, err := cB.Mutex(name, dlock.WithQueueTTL(30*time.Second)).Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "B to wait in the queue", func() bool { return admin.Exists(ctx, queue).Val() == 1 })
	unlockA = la.Unlock(ctx)
	return unlockA, <-got
}

// With the channels granted, nothing is refused and nothing is logged.
func TestACLWithChannels(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	var logs syncBuffer
	c := newClient(t, aclUser(t, s, "app", "~dlock:*", "&dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx))
	if err := c.Health(); err != nil || logs.String() != "" {
		t.Errorf("Health: %v; logs: %q", err, logs.String())
	}
}

// A server that may evict keys (allkeys-lru as a cache, volatile-* since
// lock keys carry TTLs) can lose a held lock and its fence counter: the
// first call refuses it, naming the fix, unless the caller accepts the
// risk.
func TestEvictingServerRefused(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			s := redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory", "5mb", "--maxmemory-policy", policy}})
			c := newClient(t, newRedis(t, s))
			l, err := c.Mutex(lockName(t)).TryLock(ctx)
			if err == nil {
				_ = l.Unlock(ctx)
				t.Fatal("TryLock on a server that evicts keys: no error")
			}
			if !errors.Is(err, dlock.ErrEvictionPolicy) || !strings.Contains(err.Error(), "maxmemory-policy noeviction") {
				t.Errorf("error %q: want ErrEvictionPolicy naming the fix", err)
			}
			// Refused again (not cached as passed), then accepted with the
			// risk taken, with one warning.
			if _, err := c.Mutex(lockName(t)).Lock(ctx); !errors.Is(err, dlock.ErrEvictionPolicy) {
				t.Errorf("second Lock: %v, want ErrEvictionPolicy", err)
			}
			var logs syncBuffer
			risky := newClient(t, newRedis(t, s), dlock.WithEvictionRisk(),
				dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			for range 2 {
				unlock(t, mustLock(t, risky.Mutex(lockName(t)), ctx))
			}
			if n := strings.Count(logs.String(), "WithEvictionRisk"); n != 1 {
				t.Errorf("WithEvictionRisk warned %d times, want once: %s", n, logs.String())
			}
		})
	}
}

// A script whose wake-up is refused still does its work, answers as it
// would have, and the refusal reaches the Client: a Latch counted down to
// zero by a Client that never acquired (so made no check of its own).
func TestRefusedPublishInScriptIsReported(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	var logs syncBuffer
	c := newClient(t, aclUser(t, s, "app", "~dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	l := c.Latch(lockName(t))
	if ok, err := l.TrySetCount(ctx, 1, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	if err := c.Health(); err != nil {
		t.Fatalf("Health before any publish: %v", err)
	}
	if n, err := l.CountDown(ctx); n != 0 || err != nil {
		t.Fatalf("CountDown: %d, %v; want 0, nil", n, err)
	}
	if n, err := l.Count(ctx); n != 0 || err != nil {
		t.Fatalf("Count after the last CountDown: %d, %v; want 0 (open)", n, err)
	}
	if err := c.Health(); !errors.Is(err, dlock.ErrPubSubRefused) {
		t.Errorf("Health after a refused wake-up: %v", err)
	}
	if n := strings.Count(logs.String(), "&dlock:*"); n != 1 {
		t.Errorf("logged &dlock:* %d times, want once: %s", n, logs.String())
	}
}

// reportsVersion is a node that reports another version in INFO server
// (redis_version replaced by version): a server older than the one
// installed here, as the Client sees it.
type reportsVersion struct {
	driver.Driver
	version string
	infos   atomic.Int32 // INFO server sent
}

func (d *reportsVersion) Masters(context.Context) ([]driver.Driver, error) {
	return []driver.Driver{d}, nil
}

func (d *reportsVersion) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	rs := d.Driver.Pipeline(ctx, cmds)
	for i, c := range cmds {
		if len(c.Args) != 2 || c.Args[0] != "INFO" || c.Args[1] != "server" {
			continue
		}
		d.infos.Add(1)
		if s, ok := rs[i].Val.(string); ok && d.version != "" {
			var out []string
			for _, line := range strings.Split(s, "\n") {
				if strings.HasPrefix(line, "redis_version:") {
					line = "redis_version:" + d.version + "\r"
				}
				out = append(out, line)
			}
			rs[i].Val = strings.Join(out, "\n")
		}
	}
	return rs
}

// The server's version is read once, at the first acquire, beside the
// eviction policy: this server (7.0) is accepted, and not asked again; a
// server before the oldest supported (6.0), or a Redis 6 under sharded
// pub/sub (a cluster's default), is refused with ErrUnsupportedServer
// naming its version and the oldest supported, before anything is
// written, and at every acquire until it is upgraded.
func TestServerVersionChecked(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	here := &reportsVersion{}
	c := seamClient(t, func(d driver.Driver) driver.Driver { here.Driver = d; return here },
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 3 {
		unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx))
	}
	if n := here.infos.Load(); n != 1 {
		t.Errorf("INFO server sent %d times over 3 Locks, want once", n)
	}
	if strings.Contains(logs.String(), "version") {
		t.Errorf("a warning of the version of Redis 7.0:\n%s", logs.String())
	}

	for _, tc := range []struct {
		version string
		opts    []dlock.Option
		want    []string
	}{
		{"5.0.14", nil, []string{"Redis 5.0.14", "Redis 6.0", "upgrade"}},
		{"6.2.14", []dlock.Option{dlock.WithShardedPubSub(true)}, []string{"Redis 6.2.14", "Redis 7.0", "WithShardedPubSub(false)"}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			old := &reportsVersion{version: tc.version}
			c := seamClient(t, func(d driver.Driver) driver.Driver { old.Driver = d; return old }, tc.opts...)
			name := lockName(t)
			for range 2 {
				l, err := c.Mutex(name).TryLock(ctx)
				if err == nil {
					_ = l.Unlock(ctx)
					t.Fatalf("TryLock on Redis %s: no error", tc.version)
				}
				if !errors.Is(err, dlock.ErrUnsupportedServer) {
					t.Fatalf("TryLock on Redis %s: %v, want ErrUnsupportedServer", tc.version, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q lacks %q", err, w)
					}
				}
			}
			if n, err := newRedis(t, srv).Exists(ctx, keysOf(name).Lock).Result(); err != nil || n != 0 {
				t.Errorf("the lock key after a refusal: exists %d (%v)", n, err)
			}
			if n := old.infos.Load(); n != 2 {
				t.Errorf("INFO server sent %d times over 2 refused TryLocks, want at each", n)
			}
		})
	}
}

// A user that may not run INFO: the version (and the eviction policy)
// cannot be told, so the Client lets the server be, says so once, and
// locks.
func TestVersionUntoldUnderACL(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	var logs syncBuffer
	c := newClient(t, aclUser(t, s, "app", "~dlock:*", "&dlock:*", "+@all", "-info"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 2 {
		unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx))
	}
	if n := strings.Count(logs.String(), "cannot read the server's version"); n != 1 {
		t.Errorf("warned of the version %d times, want once:\n%s", n, logs.String())
	}
}
