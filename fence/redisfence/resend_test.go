package redisfence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// A guarded write whose reply is lost after the server ran it: go-redis
// sends it again after its ReadTimeout, and a newer owner wrote between
// the two copies. The copy must answer as the first did (accepted), not
// ErrStale for a write that is in the store.

// resendScene is a holder's client through a proxy that delays the next
// reply past the client's ReadTimeout (so go-redis re-sends the command
// on a new connection) and holds every new connection's commands until
// between is done: the first copy runs, then between (a newer owner's
// write, straight to the server), then the copy.
type resendScene struct {
	t      *testing.T
	p      *faultproxy.Proxy
	holder *redis.Client
	direct *redis.Client
	guard  *redisfence.Guard // the holder's, warmed: its check of the server's policy made
}

func newResendScene(t *testing.T) *resendScene {
	t.Helper()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	holder := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, PoolSize: 2})
	t.Cleanup(func() {
		_ = holder.Close()
		_ = p.Close()
	})
	// One connection, ready; the scripts loaded; the guard's check of the
	// server's eviction policy made (its INFO is not the reply delayed).
	ctx := context.Background()
	g := redisfence.New(holder)
	if err := g.Set(ctx, token(1), name(t)+"/warm", name(t)+"/warm", "x", 0); err != nil {
		t.Fatal(err)
	}
	return &resendScene{t: t, p: p, holder: holder, direct: newRedis(t, srv), guard: g}
}

// run runs write (the holder's call) with its first reply delayed (if
// delay; else write delays the reply it means), waits
// until ran says the first copy is in the store, runs between, lets the
// copy through and returns write's error and how many times the server
// ran the command named cmd meanwhile.
func (s *resendScene) run(cmd string, delay bool, write func() error, ran func() bool, between func()) (error, int) {
	s.t.Helper()
	before := cmdCalls(s.t, s.direct, cmd)
	var seen atomic.Bool
	deliver := s.p.Stall(func() bool { return seen.Swap(true) }, nil) // the open connection goes on; new ones wait
	defer deliver()
	if delay {
		s.p.DelayNextReply(time.Hour)
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	for start := time.Now(); !ran(); {
		if time.Since(start) > 10*time.Second {
			s.t.Fatal("the first copy never ran")
		}
		time.Sleep(time.Millisecond)
	}
	between()
	deliver()
	err := <-done
	return err, cmdCalls(s.t, s.direct, cmd) - before
}

// cmdCalls is how many times the server ran cmd (commandstats).
func cmdCalls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			calls, _, _ := strings.Cut(v, ",")
			n, _ := strconv.Atoi(calls)
			return n
		}
	}
	return 0
}

func TestResentWriteAnswersAsTheFirstCopy(t *testing.T) {
	ctx := context.Background()
	for _, op := range []string{"set", "hset", "delete"} {
		t.Run(op, func(t *testing.T) {
			s := newResendScene(t)
			g, newer := s.guard, redisfence.New(s.direct)
			res := uniq(t)
			key := res + ":k"
			if op == "delete" {
				if err := newer.Set(ctx, token(4), res, key, "to delete", 0); err != nil {
					t.Fatal(err)
				}
			}
			write := map[string]func() error{
				"set":    func() error { return g.Set(ctx, token(5), res, key, "old", 0) },
				"hset":   func() error { return g.HSet(ctx, token(5), res, key, "a", "old") },
				"delete": func() error { return g.Delete(ctx, token(5), res, key) },
			}[op]
			other := key + ":other"
			err, runs := s.run("evalsha", true, write,
				func() bool { f, _ := newer.Fence(ctx, res); return f == 5 },
				func() {
					if err := newer.Set(ctx, token(6), res, other, "new", 0); err != nil {
						t.Error(err)
					}
				})
			if runs < 2 {
				t.Fatalf("the server ran the guard's script %d times: go-redis did not re-send, the test shows nothing (%v)", runs, err)
			}
			if err != nil {
				t.Fatalf("a %s the server ran, then sent again after a newer owner's write: %v; want nil (it was written)", op, err)
			}
		})
	}
}

// The same for Tx: the EXEC's reply is lost; a newer owner writes; if
// go-redis sends the transaction again, its answer must be the first's.
func TestResentTxAnswersAsTheFirstCopy(t *testing.T) {
	ctx := context.Background()
	s := newResendScene(t)
	g, newer := s.guard, redisfence.New(s.direct)
	res := uniq(t)
	key := res + ":k"
	write := func() error {
		return g.Tx(ctx, token(5), res, []string{key}, func(_ *redis.Tx, pipe redis.Pipeliner) error {
			s.p.DelayNextReply(time.Hour) // the EXEC's reply
			pipe.IncrBy(ctx, key, 1)
			return nil
		})
	}
	err, runs := s.run("exec", false, write,
		func() bool { f, _ := newer.Fence(ctx, res); return f == 5 },
		func() {
			if err := newer.Set(ctx, token(6), res, key+":other", "new", 0); err != nil {
				t.Error(err)
			}
		})
	n, _ := s.direct.Get(ctx, key).Int()
	t.Logf("EXEC ran %d times; Tx returned %v; the counter is %d", runs, err, n)
	if n != 1 {
		t.Fatalf("one Tx incremented the counter to %d", n)
	}
	if err != nil && errors.Is(err, fence.ErrStale) {
		t.Fatalf("a Tx the server ran reports %v", err)
	}
}

// uniq is a resource name of its own for each run of a test (-count).
func uniq(t *testing.T) string {
	return name(t) + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
}
