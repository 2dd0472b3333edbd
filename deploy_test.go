package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
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
