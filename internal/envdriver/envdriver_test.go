package envdriver_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A Client made while its server loads its data (answering LOADING, as
// after a restart) is made once the load is done: rueidis and valkey-go
// dial when their client is made, where go-redis dials at the first call,
// so the switch waits out LOADING for them (the torture test's worker
// respawned beside a restart failed so once, on valkey-go, seed
// 91114821). The server's load is slowed (key-load-delay, a hidden
// setting Redis's own tests use) to last about a second.
func TestNewWaitsOutLoading(t *testing.T) {
	for _, name := range []string{"rueidis", "valkey-go"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(envdriver.Env, name)
			s := redistest.StartT(t, redistest.Options{Args: []string{"--key-load-delay", "100", "--loading-process-events-interval-bytes", "1024"}})
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer rdb.Close()
			if err := rdb.Do(ctx, "DEBUG", "POPULATE", 10000).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Save(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			addr := s.Addr() // (Addr waits while Restart holds the server)
			restarted := make(chan error, 1)
			go func() { restarted <- s.Restart(false) }()
			// polling a server starting up: no signal to wait on. A bare
			// connection asks, so that no client library's own handling
			// of LOADING hides it (PING is answered while loading: GET).
			for deadline := time.Now().Add(10 * time.Second); !loading(addr); time.Sleep(5 * time.Millisecond) {
				select {
				case err := <-restarted:
					t.Fatalf("the server never answered LOADING; restarted: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the server never answered LOADING")
				}
			}
			c, err := envdriver.New(redis.NewClient(&redis.Options{Addr: addr}))
			if err != nil {
				t.Fatalf("a Client made while the server loads: %v", err)
			}
			defer c.Close()
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
			if _, err := c.Mutex(t.Name()).TryLock(ctx); err != nil {
				t.Errorf("TryLock once loaded: %v", err)
			}
		})
	}
}

// loading reports whether the server at addr answers GET with LOADING.
func loading(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	if _, err := nc.Write([]byte("GET k\r\n")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(nc).ReadString(10)
	return strings.HasPrefix(line, "-LOADING")
}
