package dlock_test

import (
	"context"
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
	ctx := context.Background()
	var logA, logB syncBuffer
	cA := newClient(t, aclUser(t, s, "app", "~dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logA, nil))))
	cB := newClient(t, aclUser(t, s, "app", "~dlock:*", "+@all"),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logB, nil))))
	admin := newRedis(t, s)
	name := lockName(t)
	queue := keysOf(name).Lock + ":queue"

	for round := range 2 {
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
		if err := la.Unlock(ctx); err != nil {
			t.Errorf("round %d: A's Unlock: %v (the lock was handed on all the same)", round, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: B's Lock after A's release: %v", round, err)
		}
	}
	for who, logs := range map[string]*syncBuffer{"A": &logA, "B": &logB} {
		if n := strings.Count(logs.String(), "&dlock:*"); n != 1 {
			t.Errorf("%s logged the missing grant &dlock:* %d times, want once; logs:\n%s", who, n, logs.String())
		}
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
			if !strings.Contains(err.Error(), "maxmemory-policy noeviction") {
				t.Errorf("error %q does not name the fix", err)
			}
		})
	}
}
