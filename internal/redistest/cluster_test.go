package redistest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                  0,
		"foo":               12182,
		"bar":               5061,
		"123456789":         0x31c3 % clusterSlots,
		"{user1000}.x":      KeySlot("user1000"),
		"a{}b":              KeySlot("a{}b"),
		"{}{user1000}":      KeySlot("{}{user1000}"),
		"x{user1000}{zzz}y": KeySlot("user1000"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if KeySlot("a{}b") == KeySlot("") {
		t.Error("an empty hash tag must not be used")
	}
}

func TestParseClusterNodes(t *testing.T) {
	raw := "07c37dfeb2352e0b 127.0.0.1:30004@31004 slave e7d1eecce10fd6bb 0 1426238317239 4 connected\n" +
		"67ed2db8d677e59e 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 5461-10922 [10923->-abc]\n" +
		"e7d1eecce10fd6bb 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 16383\n" +
		"6ec23923021cf3ff 127.0.0.1:30003@31003 master,fail - 1426238316232 0 3 disconnected\n"
	view, err := parseClusterNodes(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(view) != 4 {
		t.Fatalf("parsed %d entries", len(view))
	}
	if n := view[0]; n.port != 30004 || !n.has("slave") || n.master != "e7d1eecce10fd6bb" || len(n.slots) != 0 {
		t.Errorf("replica entry: %+v", n)
	}
	if n := view[1]; n.addr != "127.0.0.1:30002" || n.slotString() != "5461-10922" || !n.serves(10922) || n.serves(10923) {
		t.Errorf("master entry: %+v", n)
	}
	if n := view[2]; !n.has("myself") || n.slotString() != "0-5460,16383" || !n.serves(16383) {
		t.Errorf("myself entry: %+v", n)
	}
	if n := view[3]; !n.failed() || n.isMaster() == false {
		t.Errorf("failed entry: %+v", n)
	}
	if _, err := parseClusterNodes("abc 127.0.0.1:1@2 master"); err == nil {
		t.Error("short line accepted")
	}
}

// myID returns the node id of s from its own CLUSTER NODES.
func myID(t *testing.T, s *Server) (clusterNodeEntry, []clusterNodeEntry) {
	t.Helper()
	c := s.Client()
	defer c.Close()
	view, err := clusterNodes(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range view {
		if n.has("myself") {
			return n, view
		}
	}
	t.Fatalf("%s: no myself entry", s.Addr())
	return clusterNodeEntry{}, nil
}

// eventually retries f for up to d (harness-side polling in a test).
func eventually(t *testing.T, d time.Duration, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("still failing after %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	c := StartClusterT(t, ClusterOptions{})
	t.Logf("cluster of %d nodes started in %v", len(c.Nodes()), time.Since(t0))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := c.Client(func(o *redis.ClusterOptions) {
		o.DialTimeout = 300 * time.Millisecond
		o.ReadTimeout = time.Second
	})
	defer rc.Close()

	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := c.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 || len(replicas) != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3", len(masters), len(replicas))
	}

	// SET/GET across slots, every master gets some keys.
	keys := make([]string, 100)
	perMaster := map[*Server]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
		if err := rc.Set(ctx, keys[i], i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
		m, err := c.MasterOf(keys[i])
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m]++
	}
	if len(perMaster) != 3 {
		t.Fatalf("keys landed on %d masters", len(perMaster))
	}
	checkKeys := func(what string) {
		t.Helper()
		for i, k := range keys {
			v, err := rc.Get(ctx, k).Int()
			if err != nil || v != i {
				t.Fatalf("%s: GET %s = %d, %v", what, k, v, err)
			}
		}
	}
	checkKeys("after SET")

	t.Run("MasterOfReplicaOfAgreeWithClusterNodes", func(t *testing.T) {
		for _, k := range keys[:10] {
			m, err := c.MasterOf(k)
			if err != nil {
				t.Fatal(err)
			}
			mc := m.Client()
			slot, err := mc.ClusterKeySlot(ctx, k).Result()
			if err != nil || int(slot) != KeySlot(k) {
				t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; KeySlot = %d", k, slot, err, KeySlot(k))
			}
			// The master owns the slot in its own view: a plain GET is not
			// redirected.
			if v, err := mc.Get(ctx, k).Result(); err != nil || v == "" {
				t.Fatalf("GET %s on its master %s: %q, %v", k, m.Addr(), v, err)
			}
			mc.Close()
			me, _ := myID(t, m)
			if !me.isMaster() || !me.serves(KeySlot(k)) {
				t.Fatalf("%s: own entry %+v does not serve slot %d", m.Addr(), me, KeySlot(k))
			}
			r, err := c.ReplicaOf(m)
			if err != nil {
				t.Fatal(err)
			}
			rme, _ := myID(t, r)
			if !rme.has("slave") || rme.master != me.id {
				t.Fatalf("replica %s: entry %+v, want replica of %s", r.Addr(), rme, me.id)
			}
		}
	})

	t.Run("Failover", func(t *testing.T) {
		k := keys[0]
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.ReplicaOf(m)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := c.Failover(r); err != nil {
			t.Fatal(err)
		}
		t.Logf("CLUSTER FAILOVER of %s -> %s took %v", m.Addr(), r.Addr(), time.Since(t0))
		if got, err := c.MasterOf(k); err != nil || got != r {
			t.Fatalf("MasterOf after failover = %v, %v; want %s", got, err, r.Addr())
		}
		if got, err := c.ReplicaOf(r); err != nil || got != m {
			t.Fatalf("ReplicaOf(new master) = %v, %v; want old master %s", got, err, m.Addr())
		}
		// m is a replica now: swapping back right away works too.
		if err := c.Failover(m); err != nil {
			t.Fatalf("failover back to %s: %v", m.Addr(), err)
		}
		if got, err := c.MasterOf(k); err != nil || got != m {
			t.Fatalf("MasterOf after failover back = %v, %v; want %s", got, err, m.Addr())
		}
		if err := c.Failover(m); err == nil || !strings.Contains(err.Error(), "not a replica") {
			t.Fatalf("Failover of a master: %v", err)
		}
		// The client follows MOVED without help.
		checkKeys("after failover")
		if err := rc.Set(ctx, k, 0, 0).Err(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("KillMaster", func(t *testing.T) {
		k := keys[1]
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.ReplicaOf(m)
		if err != nil {
			t.Fatal(err)
		}
		// Everything written so far is on the replica.
		mc := m.Client()
		if n, err := mc.Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 on %s = %d, %v", m.Addr(), n, err)
		}
		mc.Close()
		t0 := time.Now()
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitFailoverAfterKill(m, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("kill -9 of master %s: %s took over after %v", m.Addr(), r.Addr(), time.Since(t0))
		if got, err := c.MasterOf(k); err != nil || got != r {
			t.Fatalf("MasterOf after kill = %v, %v; want %s", got, err, r.Addr())
		}
		rc.ReloadState(ctx)
		d := eventually(t, 5*time.Second, func() error { return rc.Get(ctx, k).Err() })
		t.Logf("client working again %v after WaitFailoverAfterKill", d)
		checkKeys("after kill")
		if err := c.WaitFailoverAfterKill(r, time.Second); err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("WaitFailoverAfterKill on a running node: %v", err)
		}

		// The killed node comes back as a replica of its successor.
		t0 = time.Now()
		if err := m.Restart(false); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted %s rejoined in %v", m.Addr(), time.Since(t0))
		if got, err := c.ReplicaOf(r); err != nil || got != m {
			t.Fatalf("ReplicaOf(successor) = %v, %v; want %s", got, err, m.Addr())
		}
	})

	dirs := []string{}
	for _, s := range c.Nodes() {
		dirs = append(dirs, s.dir)
	}
	c.Close()
	c.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("node dir %s still exists: %v", d, err)
		}
	}
}

func TestClusterTooFewMasters(t *testing.T) {
	if _, err := StartCluster(ClusterOptions{Masters: 2}); err == nil {
		t.Fatal("a 2-master cluster was started")
	}
}
