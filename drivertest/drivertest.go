// Package drivertest is the conformance suite of driver.Driver: what every
// driver (go-redis's, rueidisdlock's, valkeydlock's, and yours) must do,
// checked on real redis-server processes that it starts: redis-server
// (and redis-cli, for the cluster) must be on the PATH. It speaks to a
// driver only through dlock's interface, so any client library can be
// checked with it, as testing/fstest checks an fs.FS; the servers'
// administration (CLIENT KILL, replication state) goes through the
// harness's own connections. A driver that passes it gives dlock's locks
// what they need of a client: replies decoded as Reply says, keyed
// commands sent to their key's node, a pinned connection for WAIT,
// pub/sub confirmed and resubscribed after a reconnect.
//
//	func TestDriver(t *testing.T) {
//		drivertest.Run(t, newSingle, drivertest.Cluster(newCluster), drivertest.Sentinel(newSentinel))
//	}
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Option adds topologies to Run.
type Option func(*config)

type config struct {
	cluster  func(t *testing.T, addrs []string) driver.Driver
	sentinel func(t *testing.T, master string, sentinels []string) driver.Driver
}

// Cluster adds the checks on a Redis Cluster (3 masters, a replica each):
// newDriver makes a driver of the cluster whose nodes are at addrs.
func Cluster(newDriver func(t *testing.T, addrs []string) driver.Driver) Option {
	return func(c *config) { c.cluster = newDriver }
}

// Sentinel adds the checks on a Sentinel-managed primary (one replica,
// three sentinels): newDriver makes a driver of the primary named master
// that the sentinels at addrs monitor.
func Sentinel(newDriver func(t *testing.T, master string, sentinels []string) driver.Driver) Option {
	return func(c *config) { c.sentinel = newDriver }
}

// Run runs the conformance suite: on a single redis-server (with a
// replica, for WAIT) with drivers that newDriver makes of the server at
// addr, and on the topologies that opts add. newDriver closes what it
// makes when t ends (t.Cleanup). Every check is a subtest of t.
func Run(t *testing.T, newDriver func(t *testing.T, addr string) driver.Driver, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	t.Run("Single", func(t *testing.T) { runSingle(t, newDriver) })
	if cfg.sentinel != nil {
		t.Run("Sentinel", func(t *testing.T) { runSentinel(t, cfg.sentinel) })
	}
	if cfg.cluster != nil {
		t.Run("Cluster", func(t *testing.T) { runCluster(t, cfg.cluster) })
	}
}

// primary is a server and its replica, which has synced.
func primary(t *testing.T) (s, replica *redistest.Server) {
	t.Helper()
	s = redistest.StartT(t, redistest.Options{})
	replica = redistest.StartT(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(s.Port())}})
	waitReplicas(t, s, 1)
	return s, replica
}

// waitReplicas waits until s has n replicas online.
func waitReplicas(t *testing.T, s *redistest.Server, n int) {
	t.Helper()
	admin := s.Client()
	defer admin.Close()
	want := fmt.Sprintf("connected_slaves:%d", n)
	eventually(t, "replicas of "+s.Addr(), func() bool {
		info, err := admin.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, want) && strings.Contains(info, "state=online")
	})
}

func runSingle(t *testing.T, newDriver func(t *testing.T, addr string) driver.Driver) {
	s, replica := primary(t)
	d := newDriver(t, s.Addr())
	t.Run("Info", func(t *testing.T) {
		info := d.Info()
		if info.Name == "" || info.Cluster {
			t.Errorf("Info() = %+v, want a Name and Cluster false", info)
		}
	})
	t.Run("Replies", func(t *testing.T) { testReplies(t, d) })
	t.Run("PipelineReplies", func(t *testing.T) { testPipelineReplies(t, d) })
	t.Run("Scripts", func(t *testing.T) { testScripts(t, d) })
	t.Run("Dedicated", func(t *testing.T) { testDedicated(t, d, "") })
	t.Run("DedicatedIsExclusive", func(t *testing.T) { testDedicatedExclusive(t, d) })
	t.Run("WaitFollowsTheWrite", func(t *testing.T) { testWait(t, d, key(t), replica) })
	t.Run("PubSub", func(t *testing.T) { testPubSub(t, d, false, "", []*redistest.Server{s}, channel(t)) })
	t.Run("ShardedPubSub", func(t *testing.T) { testPubSub(t, d, true, "", []*redistest.Server{s}, channel(t)) })
	t.Run("PubSubCloseWhileSubscribing", func(t *testing.T) { testPubSubClose(t, d) })
	t.Run("MastersAndNodeOf", func(t *testing.T) {
		ms, err := d.Masters(context.Background())
		if err != nil || len(ms) != 1 {
			t.Fatalf("Masters() = %d drivers, %v; want 1", len(ms), err)
		}
		if v := ms[0].Do(context.Background(), cmd("PING")); v.Val != "PONG" {
			t.Errorf("PING on Masters()[0] = %+v", v)
		}
		if addr, err := d.NodeOf(context.Background(), "k"); err == nil {
			t.Errorf("NodeOf on a single node = %q, want an error", addr)
		}
	})
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, newDriver) })
}

func runSentinel(t *testing.T, newDriver func(t *testing.T, master string, sentinels []string) driver.Driver) {
	st := redistest.StartSentinelT(t, redistest.SentinelOptions{})
	m, err := st.Master()
	if err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, m, 1)
	replicas, err := st.Replicas()
	if err != nil || len(replicas) != 1 {
		t.Fatalf("Replicas() = %v, %v", replicas, err)
	}
	d := newDriver(t, st.MasterName(), st.SentinelAddrs())
	t.Run("Info", func(t *testing.T) {
		if info := d.Info(); info.Name == "" || info.Cluster {
			t.Errorf("Info() = %+v, want a Name and Cluster false", info)
		}
	})
	t.Run("Replies", func(t *testing.T) { testReplies(t, d) })
	t.Run("Dedicated", func(t *testing.T) { testDedicated(t, d, "") })
	t.Run("WaitFollowsTheWrite", func(t *testing.T) { testWait(t, d, key(t), replicas[0]) })
	t.Run("PubSub", func(t *testing.T) { testPubSub(t, d, false, "", st.Nodes(), channel(t)) })
	t.Run("Masters", func(t *testing.T) {
		ms, err := d.Masters(context.Background())
		if err != nil || len(ms) != 1 {
			t.Fatalf("Masters() = %d drivers, %v; want 1", len(ms), err)
		}
		port := configPort(t, ms[0].Do(context.Background(), cmd("CONFIG", "GET", "port")))
		if port != m.Port() {
			t.Errorf("Masters()[0] is on port %d, the master on %d", port, m.Port())
		}
	})
}

// cmd makes a command without keys; keyed one whose key is its second
// word.
func cmd(args ...any) driver.Command   { return driver.Command{Args: args} }
func keyed(args ...any) driver.Command { return driver.Command{Args: args, FirstKey: 1, Keys: 1} }

// script makes EVAL or EVALSHA with keys and args.
func script(name, shaOrSrc string, keys []string, args ...any) driver.Command {
	words := []any{name, shaOrSrc, len(keys)}
	for _, k := range keys {
		words = append(words, k)
	}
	return driver.Command{Args: append(words, args...), FirstKey: 3, Keys: len(keys)}
}

// key returns a key no other test uses (its test's name and random hex).
func key(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "drivertest:" + strings.ReplaceAll(t.Name(), "/", ".") + ":" + hex.EncodeToString(b[:])
}

func channel(t *testing.T) string { return key(t) + ":ch" }

// eventually polls cond, which observes the servers, for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// configPort reads the port out of a CONFIG GET port reply.
func configPort(t *testing.T, r driver.Reply) int {
	t.Helper()
	vs, err := r.Slice()
	if err != nil || len(vs) != 2 {
		t.Fatalf("CONFIG GET port = %+v, %v", r, err)
	}
	n, err := driver.Reply{Val: vs[1]}.Int64()
	if err != nil {
		t.Fatalf("CONFIG GET port = %+v: %v", r, err)
	}
	return int(n)
}

// testUnreachable: a failed round trip is an error that is not an
// ErrorReply, on every reply of a pipeline.
func testUnreachable(t *testing.T, newDriver func(t *testing.T, addr string) driver.Driver) {
	s := redistest.StartT(t, redistest.Options{})
	d := newDriver(t, s.Addr())
	if r := d.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r := d.Do(ctx, cmd("PING")); r.Err == nil || isReply(r.Err) {
		t.Errorf("PING to a killed server = %+v, want a failed round trip", r)
	}
	for i, r := range d.Pipeline(ctx, []driver.Command{cmd("PING"), keyed("GET", "k")}) {
		if r.Err == nil || isReply(r.Err) {
			t.Errorf("pipeline reply %d from a killed server = %+v, want a failed round trip", i, r)
		}
	}
}
