package drivertest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

func runCluster(t *testing.T, newDriver func(t *testing.T, addrs []string) driver.Driver) {
	c := redistest.StartClusterT(t, redistest.ClusterOptions{})
	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, n.Addr())
	}
	for _, m := range mustMasters(t, c) {
		waitReplicas(t, m, 1)
	}
	d := newDriver(t, addrs)
	t.Run("Info", func(t *testing.T) {
		if info := d.Info(); info.Name == "" || !info.Cluster {
			t.Errorf("Info() = %+v, want a Name and Cluster true", info)
		}
	})
	t.Run("Replies", func(t *testing.T) { testReplies(t, d) })
	t.Run("PipelineReplies", func(t *testing.T) { testPipelineReplies(t, d) })
	t.Run("KeysOnEveryMaster", func(t *testing.T) { noRedirects(t, c, func() { testClusterKeys(t, d, c) }) })
	t.Run("ScriptsGoToTheirKeysNode", func(t *testing.T) { noRedirects(t, c, func() { testClusterScripts(t, d, c) }) })
	t.Run("MastersAndNodeOf", func(t *testing.T) { testClusterNodes(t, d, c) })
	for i, k := range keyPerMaster(t, c) {
		m, replica := masterOf(t, c, k)
		t.Run(fmt.Sprintf("Dedicated/master%d", i), func(t *testing.T) {
			noRedirects(t, c, func() { testDedicated(t, d, k, m.Port()) })
		})
		t.Run(fmt.Sprintf("WaitFollowsTheWrite/master%d", i), func(t *testing.T) { testWait(t, d, k, replica) })
		t.Run(fmt.Sprintf("ShardedPubSubOnNode/master%d", i), func(t *testing.T) {
			node, err := d.NodeOf(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			testPubSub(t, d, true, node, c.Nodes(), k)
		})
		t.Run(fmt.Sprintf("ShardedPubSubByChannel/master%d", i), func(t *testing.T) {
			testPubSub(t, d, true, "", c.Nodes(), k+":ch")
		})
	}
	t.Run("ShardedPubSubOfSeveralSlots", func(t *testing.T) { testClusterPubSubSlots(t, d, c) })
	t.Run("ShardedPubSubIdleBeforeSubscribe", func(t *testing.T) { testClusterPubSubIdle(t, d, c) })
	t.Run("PubSub", func(t *testing.T) { testPubSub(t, d, false, "", c.Nodes(), channel(t)) })
	// Last: it moves a slot.
	t.Run("ShardedPubSubSlotMoved", func(t *testing.T) { testClusterSlotMoved(t, d, c) })
}

// testClusterSlotMoved: when a sharded channel's slot moves to another
// master, the server ends its subscription there; the driver tells it
// (an Unsubscribed event), forgets the channel, and, after a Refresh,
// NodeOf names the new master, where the channel can be subscribed again.
func testClusterSlotMoved(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	ch := channel(t)
	node, err := d.NodeOf(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ps := d.PubSub(node, true, rec.event)
	defer func() { _ = ps.Close() }()
	if err := ps.Subscribe(ctx, ch); err != nil {
		t.Fatal(err)
	}
	rec.await(t, 0, subscribed(ch))
	var to *redistest.Server
	for _, m := range mustMasters(t, c) {
		if m.Addr() != node {
			to = m
			break
		}
	}
	mark := rec.mark()
	if _, err := c.MigrateSlot(ch, to); err != nil {
		t.Fatal(err)
	}
	rec.await(t, mark, driver.Event{Channel: ch, Unsubscribed: true})
	eventually(t, "NodeOf to name the slot's new master", func() bool {
		d.Refresh()
		addr, err := d.NodeOf(ctx, ch)
		return err == nil && addr == to.Addr()
	})
	moved := d.PubSub(to.Addr(), true, rec.event)
	defer func() { _ = moved.Close() }()
	mark = rec.mark()
	if err := moved.Subscribe(ctx, ch); err != nil {
		t.Fatal(err)
	}
	rec.await(t, mark, subscribed(ch))
	if n := publish(t, d, true, ch, "after"); n != 1 {
		t.Errorf("SPUBLISH after the move reached %d subscribers, want 1 (the old connection must not carry the channel)", n)
	}
	rec.await(t, mark, message(ch, "after"))
	rec.check(t)
}

// noRedirects runs f and fails t if a node answered one of its commands
// with MOVED or ASK: a driver must send a keyed command to its key's
// node, not rely on the redirection.
func noRedirects(t *testing.T, c *redistest.Cluster, f func()) {
	t.Helper()
	before := redirects(t, c)
	f()
	if after := redirects(t, c); after != before {
		t.Errorf("the nodes answered %d commands with MOVED or ASK", after-before)
	}
}

var redirectStat = regexp.MustCompile(`errorstat_(?:MOVED|ASK):count=(\d+)`)

// redirects sums the MOVED and ASK replies of every node (INFO errorstats).
func redirects(t *testing.T, c *redistest.Cluster) int {
	t.Helper()
	n := 0
	for _, s := range c.Nodes() {
		admin := s.Client()
		info, err := admin.Info(context.Background(), "errorstats").Result()
		admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range redirectStat.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

func mustMasters(t *testing.T, c *redistest.Cluster) []*redistest.Server {
	t.Helper()
	ms, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// masterOf returns the master that serves k and a replica of it.
func masterOf(t *testing.T, c *redistest.Cluster, k string) (m, replica *redistest.Server) {
	t.Helper()
	m, err := c.MasterOf(k)
	if err != nil {
		t.Fatal(err)
	}
	if replica, err = c.ReplicaOf(m); err != nil {
		t.Fatal(err)
	}
	return m, replica
}

// keyPerMaster returns a fresh key of each master, in the order of
// Masters.
func keyPerMaster(t *testing.T, c *redistest.Cluster) []string {
	t.Helper()
	ms := mustMasters(t, c)
	out := make([]string, len(ms))
	for found := 0; found < len(ms); {
		k := key(t)
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(ms, m); out[i] == "" {
			out[i] = k
			found++
		}
	}
	return out
}

// testClusterKeys: keys of every slot range go to their node, alone and
// in one pipeline, with replies in order.
func testClusterKeys(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	var keys []string
	for range 4 {
		keys = append(keys, keyPerMaster(t, c)...)
	}
	var sets, gets []driver.Command
	for i, k := range keys {
		sets = append(sets, keyed("SET", k, i))
		gets = append(gets, keyed("GET", k))
	}
	for i, r := range d.Pipeline(ctx, sets) {
		if err := is("OK")(r); err != nil {
			t.Errorf("SET %s: %v", keys[i], err)
		}
	}
	for i, r := range d.Pipeline(ctx, gets) {
		if err := is(fmt.Sprint(i))(r); err != nil {
			t.Errorf("pipelined GET %s: %v", keys[i], err)
		}
		if err := is(fmt.Sprint(i))(d.Do(ctx, gets[i])); err != nil {
			t.Errorf("GET %s: %v", keys[i], err)
		}
	}
}

// testClusterScripts: a script call goes to the node of its keys. A new
// script is loaded (EVAL) on one master only: EVALSHA with a key of that
// master then finds it, with a key of another master it meets NOSCRIPT.
func testClusterScripts(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	keys := keyPerMaster(t, c)
	for i, k := range keys {
		src, sha := newScript(t)
		if err := is([]any{k, "a"})(d.Do(ctx, script("EVAL", src, []string{k}, "a"))); err != nil {
			t.Fatalf("EVAL with key %s: %v", k, err)
		}
		var cmds []driver.Command
		var checks []func(driver.Reply) error
		for j, other := range keys {
			cmds = append(cmds, script("EVALSHA", sha, []string{other}, "a"))
			if i == j {
				checks = append(checks, is([]any{other, "a"}))
			} else {
				checks = append(checks, refused("NOSCRIPT"))
			}
		}
		for j, r := range d.Pipeline(ctx, cmds) {
			if err := checks[j](r); err != nil {
				t.Errorf("loaded on master %d, pipelined EVALSHA with a key of master %d: %v", i, j, err)
			}
			if err := checks[j](d.Do(ctx, cmds[j])); err != nil {
				t.Errorf("loaded on master %d, EVALSHA with a key of master %d: %v", i, j, err)
			}
		}
	}
}

// testClusterNodes: NodeOf names the master of a key's slot; Masters are
// the masters only, each reachable.
func testClusterNodes(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	for _, k := range keyPerMaster(t, c) {
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		if addr, err := d.NodeOf(ctx, k); err != nil || addr != m.Addr() {
			t.Errorf("NodeOf(%q) = %q, %v; want %s", k, addr, err, m.Addr())
		}
	}
	ds, err := d.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []int
	for _, n := range ds {
		got = append(got, configPort(t, n.Do(ctx, cmd("CONFIG", "GET", "port"))))
		role, err := n.Do(ctx, cmd("ROLE")).Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			t.Errorf("ROLE on one of Masters() = %v, %v", role, err)
		}
	}
	for _, m := range mustMasters(t, c) {
		want = append(want, m.Port())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Masters() are on ports %v, the masters on %v", got, want)
	}
}

// testClusterPubSubSlots: one sharded connection to a node carries
// channels of several of its slots.
func testClusterPubSubSlots(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	first := keyPerMaster(t, c)[0]
	node, err := d.NodeOf(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := masterOf(t, c, first)
	channels := []string{first}
	for len(channels) < 4 {
		k := key(t)
		if o, err := c.MasterOf(k); err == nil && o == m && redistest.KeySlot(k) != redistest.KeySlot(channels[0]) {
			channels = append(channels, k)
		}
	}
	rec := &recorder{}
	ps := d.PubSub(node, true, rec.event)
	defer ps.Close()
	for _, ch := range channels {
		if err := ps.Subscribe(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	var want []driver.Event
	for _, ch := range channels {
		want = append(want, subscribed(ch))
	}
	rec.await(t, 0, want...)
	for _, ch := range channels {
		if n := publish(t, d, true, ch, "m"); n != 1 {
			t.Errorf("SPUBLISH %s reached %d subscribers", ch, n)
		}
		rec.await(t, 0, message(ch, "m"))
	}
	rec.check(t)
}

// testClusterPubSubIdle: a sharded pub/sub connection opened without a
// node and left idle before its first Subscribe still subscribes on the
// node of its channel. (go-redis's receive loop, started at once, used to
// connect to a random node first, where SSUBSCRIBE is answered MOVED and
// the subscription is never confirmed.)
func testClusterPubSubIdle(t *testing.T, d driver.Driver, c *redistest.Cluster) {
	ctx := context.Background()
	for _, k := range keyPerMaster(t, c) {
		rec := &recorder{}
		ps := d.PubSub("", true, rec.event)
		// Not a synchronisation: the window in which a driver that
		// connects before it knows its channel would do so.
		time.Sleep(100 * time.Millisecond)
		if err := ps.Subscribe(ctx, k); err != nil {
			_ = ps.Close()
			t.Fatal(err)
		}
		rec.await(t, 0, subscribed(k))
		if n := publish(t, d, true, k, "m"); n != 1 {
			t.Errorf("SPUBLISH %s reached %d subscribers", k, n)
		}
		_ = ps.Close()
		rec.check(t)
	}
}
