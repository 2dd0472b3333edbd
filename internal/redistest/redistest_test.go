package redistest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartPingSetGet(t *testing.T) {
	s := StartT(t, Options{})
	if s.Port() == 0 || s.Addr() == "" {
		t.Fatalf("bad address %q", s.Addr())
	}
	c := s.Client()
	defer c.Close()
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET = %q, %v", v, err)
	}
	// The debug command is enabled for local connections.
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0").Err(); err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after FlushAll = %d, %v", n, err)
	}
}

func TestRestartWithoutAOFLosesData(t *testing.T) {
	s := StartT(t, Options{})
	c := s.Client()
	defer c.Close()
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port := s.Port()
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Fatalf("port changed from %d to %d", port, s.Port())
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart: %v, want redis.Nil", err)
	}
}

func TestRestartWithAOFKeepsData(t *testing.T) {
	s := StartT(t, Options{AOF: true})
	c := s.Client()
	defer c.Close()
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after AOF restart = %q, %v", v, err)
	}
}

func TestKillThenRestartAndClose(t *testing.T) {
	s := StartT(t, Options{Args: []string{"--maxmemory", "10mb"}})
	c := s.Client(func(o *redis.Options) { o.MaxRetries = -1 })
	defer c.Close()
	ctx := ctxT(t)
	if v, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || v["maxmemory"] != "10485760" {
		t.Fatalf("extra args not applied: %v, %v", v, err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded on a killed server")
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	dir := s.dir
	s.Close()
	s.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir still exists: %v", err)
	}
	if err := s.Restart(false); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

func TestPauseResume(t *testing.T) {
	s := StartT(t, Options{})
	c := s.Client(func(o *redis.Options) {
		o.ReadTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
	})
	defer c.Close()
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	err := c.Ping(ctx).Err()
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING while paused: %v, want a timeout", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after resume: %v", err)
	}
}

func TestStartN(t *testing.T) {
	servers := StartNT(t, 3, Options{})
	seen := map[int]bool{}
	ctx := ctxT(t)
	for i, s := range servers {
		if seen[s.Port()] {
			t.Fatalf("port %d used twice", s.Port())
		}
		seen[s.Port()] = true
		c := s.Client()
		if err := c.Set(ctx, "id", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// The masters are independent.
	for i, s := range servers {
		c := s.Client()
		v, err := c.Get(ctx, "id").Int()
		c.Close()
		if err != nil || v != i {
			t.Fatalf("server %d: id = %d, %v", i, v, err)
		}
	}
}

func TestBadArgsReportsLog(t *testing.T) {
	_, err := Start(Options{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		t.Fatal("Start with a bad option succeeded")
	}
	t.Logf("expected error: %v", err)
}

func TestNoServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := Start(Options{}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("Start without redis-server: %v, want ErrNoServer", err)
	}
}

// serverTime is the server's TIME.
func serverTime(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// The clock shim moves the server's wall clock: TIME (also inside a
// script) stands still when frozen and moves by a step either way, and
// keys expire by it; the monotonic clock, which the server's event loop
// runs on, is untouched (the server answers throughout).
func TestClockShimMovesTheServersClock(t *testing.T) {
	s := StartT(t, Options{ShimClock: true})
	c := s.Client()
	defer c.Close()
	ctx := ctxT(t)

	if d := serverTime(t, c).Sub(time.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("unshimmed TIME is %v from the real clock", d)
	}

	at := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	if err := s.SetClock(Frozen(at)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := serverTime(t, c); !got.Equal(at) {
			t.Fatalf("frozen TIME = %v, want %v", got, at)
		}
	}
	v, err := c.Eval(ctx, "return redis.call('TIME')", nil).Slice()
	if err != nil || len(v) != 2 || v[0] != strconv.FormatInt(at.Unix(), 10) {
		t.Fatalf("TIME in a script = %v, %v; want %d s", v, err, at.Unix())
	}

	// A key's expiry passes only when the frozen clock is stepped past it.
	if err := c.Set(ctx, "k", "v", 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.StepClock(400 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := serverTime(t, c); !got.Equal(at.Add(400 * time.Millisecond)) {
		t.Fatalf("TIME after a 400 ms step = %v, want %v", got, at.Add(400*time.Millisecond))
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS k 400 ms into its 500 ms = %d, %v", n, err)
	}
	if err := s.StepClock(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k 600 ms into its 500 ms = %d, %v", n, err)
	}

	// Stepped back: the real clock an hour ago, moving.
	if err := s.SetClock(Offset(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	first := serverTime(t, c)
	if d := first.Sub(time.Now().Add(-time.Hour)); d < -time.Second || d > time.Second {
		t.Fatalf("TIME an hour back is %v from where it should be", d)
	}
	// A key set to live 2 s lives on after a step forward of a second,
	// and is gone after one of two more.
	if err := c.Set(ctx, "k2", "v", 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.StepClock(time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k2").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS k2 a second into its 2 s = %d, %v", n, err)
	}
	if d := serverTime(t, c).Sub(first); d < time.Second {
		t.Fatalf("TIME moved %v after a step of 1 s", d)
	}
	if err := s.StepClock(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k2").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k2 3 s into its 2 s = %d, %v", n, err)
	}

	// Back to the real clock; and the setting lasts a restart.
	if err := s.SetClock(Frozen(at)); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	if got := serverTime(t, c); !got.Equal(at) {
		t.Fatalf("TIME after a restart = %v, want the frozen %v", got, at)
	}
	if err := s.SetClock(Clock{}); err != nil {
		t.Fatal(err)
	}
	if d := serverTime(t, c).Sub(time.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("TIME back on the real clock is %v from it", d)
	}
}
