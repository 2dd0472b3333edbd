package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The CLI on a Redis Cluster and on a master behind Sentinels, each
// started once for the package on first use and closed by TestMain.
var topologies struct {
	clusterOnce, sentinelOnce sync.Once
	cluster                   *redistest.Cluster
	sentinel                  *redistest.Sentinel
	clusterErr, sentinelErr   error
}

// testCluster returns the package's cluster: 3 masters, no replicas.
func testCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	topologies.clusterOnce.Do(func() {
		topologies.cluster, topologies.clusterErr = redistest.StartCluster(redistest.ClusterOptions{ReplicasPerMaster: -1})
	})
	if errors.Is(topologies.clusterErr, redistest.ErrNoCLI) {
		t.Skip(topologies.clusterErr)
	}
	if topologies.clusterErr != nil {
		t.Fatal(topologies.clusterErr)
	}
	return topologies.cluster
}

// testSentinel returns the package's master behind one Sentinel (no
// replica: the tests do not fail over; a URL lists a dead Sentinel too).
func testSentinel(t *testing.T) *redistest.Sentinel {
	t.Helper()
	topologies.sentinelOnce.Do(func() {
		topologies.sentinel, topologies.sentinelErr = redistest.StartSentinel(redistest.SentinelOptions{Replicas: -1, Sentinels: 1})
	})
	if topologies.sentinelErr != nil {
		t.Fatal(topologies.sentinelErr)
	}
	return topologies.sentinel
}

// closeTopologies closes what testCluster and testSentinel started.
func closeTopologies() {
	if topologies.cluster != nil {
		topologies.cluster.Close()
	}
	if topologies.sentinel != nil {
		topologies.sentinel.Close()
	}
}

// clusterLocks holds a mutex under prefix on each master of c, taken by
// the library on a ClusterClient, and returns their names (one per master).
func clusterLocks(t *testing.T, c *redistest.Cluster, prefix string) []string {
	t.Helper()
	ctx := testCtx(t)
	rdb := c.Client()
	t.Cleanup(func() { rdb.Close() })
	lc, err := dlock.New(rdb, dlock.WithPrefix(prefix), dlock.WithOwnerLabel("cluster-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < 3 && i < 100; i++ {
		name := fmt.Sprintf("shard/%d", i)
		m, err := c.MasterOf(keysFor(prefix, name).Lock)
		if err != nil {
			t.Fatal(err)
		}
		if seen[m.Addr()] {
			continue
		}
		seen[m.Addr()] = true
		if _, err := lc.Mutex(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if len(names) < 3 {
		t.Fatalf("locks on %d masters only: %v", len(names), names)
	}
	return names
}

// TestClusterURL runs the commands on a 3-master cluster named by each
// form of URL: redis+cluster://, a plain redis:// URL of one node (found
// to be a cluster node), and go-redis's ?addr= form. ls must see the locks
// of every master; run, inspect, unlock and check must work there.
func TestClusterURL(t *testing.T) {
	c := testCluster(t)
	prefix := testPrefix(t)
	names := clusterLocks(t, c, prefix)
	nodes := c.Nodes()
	urls := map[string]string{
		"redis+cluster": "redis+cluster://127.0.0.1:1," + nodes[1].Addr() + "," + nodes[2].Addr(), // a dead seed first
		"node":          "redis://" + nodes[0].Addr(),
		"go-redis":      "redis://" + nodes[2].Addr() + "?addr=" + nodes[0].Addr(),
	}
	for form, url := range urls {
		t.Run(form, func(t *testing.T) {
			r := runCLI("ls", "--redis", url, "--prefix", prefix, "--json")
			if r.code != exitOK {
				t.Fatalf("ls: code %d, stderr %q", r.code, r.stderr)
			}
			var got []string
			for _, l := range decodeLocks(t, r.stdout) {
				if l.Kind == "mutex" && len(l.Holders) == 1 {
					got = append(got, l.Name)
				}
			}
			if strings.Join(got, " ") != strings.Join(names, " ") {
				t.Errorf("ls lists the held mutexes %v, want %v (one on each master)", got, names)
			}
		})
	}

	// A dead seed costs go-redis's dial retries (0.4 s) when tried first:
	// only the live ones from here on.
	url := "redis+cluster://" + nodes[1].Addr() + "," + nodes[2].Addr()
	const job = "job/cluster"
	r := runCLI("run", "--redis", url, "--prefix", prefix, job, "--", "sh", "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"`)
	m := fenceLine.FindStringSubmatch(r.stdout)
	if r.code != exitOK || m == nil || m[2] != job {
		t.Fatalf("run: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	must(t, runCLI("inspect", "--redis", urls["node"], "--prefix", prefix, job), exitOK, "no lock called")
	must(t, runCLI("unlock", "--force", "--redis", url, "--prefix", prefix, names[0]), exitOK)
	must(t, runCLI("inspect", "--redis", url, "--prefix", prefix, names[0]), exitOK, "no lock called")
	must(t, runCLI("top", "--redis", url, "--prefix", prefix, "--iterations", "1"), exitOK, names[1], names[2])

	// check reads every master's settings.
	r = runCLI("check", "--redis", urls["node"])
	must(t, r, exitOK, "at cluster "+nodes[0].Addr(), "everything dlock needs is there")
	for _, n := range nodes {
		if !strings.Contains(r.stdout, "ok       eviction     "+n.Addr()+": maxmemory-policy noeviction") {
			t.Errorf("check does not show master %s's eviction policy:\n%s", n.Addr(), r.stdout)
		}
	}

	// A node URL whose options do not fit a cluster is refused when the
	// server turns out to be a cluster node; so is a database but 0.
	for u, want := range map[string]string{
		"redis://" + nodes[0].Addr() + "?idle_timeout=1m": nodes[0].Addr() + " is a Redis Cluster node: the URL has options for a single server only: write redis+cluster://",
		"redis://" + nodes[0].Addr() + "/2":               "SELECT is not allowed in cluster mode",
	} {
		if r := runCLI("ls", "--redis", u); r.code != exitFail || !strings.Contains(r.stderr, want) {
			t.Errorf("ls --redis %s: code %d, stderr %q; want 1 and %q", u, r.code, r.stderr, want)
		}
	}
}

// TestDialKinds: dial gives a plain client for a server, a cluster client
// for a cluster node, and refuses a Sentinel named as a server.
func TestDialKinds(t *testing.T) {
	ctx := testCtx(t)
	c, st := testCluster(t), testSentinel(t)
	for _, tc := range []struct {
		url, where string
		cluster    bool
	}{
		{serverURL(), testServer.Addr(), false},
		{"redis://" + c.Nodes()[0].Addr(), "cluster " + c.Nodes()[0].Addr(), true},
		{"redis+sentinel://" + st.SentinelAddrs()[0] + "/" + st.MasterName(), "master", false},
	} {
		tg, err := parseTarget(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		rdb, where, err := dial(ctx, tg)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		_, cluster := rdb.(*redis.ClusterClient)
		rdb.Close()
		if cluster != tc.cluster || !strings.HasPrefix(where, tc.where) {
			t.Errorf("%s: a cluster client %v at %q, want %v at %q", tc.url, cluster, where, tc.cluster, tc.where)
		}
	}
	r := runCLI("ls", "--redis", "redis://"+st.SentinelAddrs()[0])
	if r.code != exitFail || !strings.Contains(r.stderr, "is a Sentinel, not a Redis server: name the master it watches, redis+sentinel://") {
		t.Errorf("ls on a Sentinel's redis:// URL: code %d, stderr %q", r.code, r.stderr)
	}
}

// TestSentinelURL runs the commands on the master behind the Sentinels,
// named by redis+sentinel:// with a dead Sentinel first in the list and
// the master's password; $DLOCK_REDIS_URL carries it as well as --redis.
func TestSentinelURL(t *testing.T) {
	st := testSentinel(t)
	master, err := st.Master()
	if err != nil {
		t.Fatal(err)
	}
	// A user with a password on the master, so that the URL's credentials
	// are seen to reach it (the Sentinels need none).
	admin := master.Client()
	defer admin.Close()
	ctx := testCtx(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "reset", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", "app") })
	prefix := testPrefix(t)
	url := "redis+sentinel://app:s3cret@127.0.0.1:1," + strings.Join(st.SentinelAddrs(), ",") + "/" + st.MasterName()

	const job = "job/sentinel"
	r := runCLI("run", "--redis", url, "--prefix", prefix, job, "--", "sh", "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"`)
	m := fenceLine.FindStringSubmatch(r.stdout)
	if r.code != exitOK || m == nil || m[2] != job {
		t.Fatalf("run: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The lock was taken on the master itself.
	if n, err := admin.Exists(ctx, keysFor(prefix, job).Fence).Result(); err != nil || n != 1 {
		t.Errorf("the master has no fence counter of %q (exists %d, %v)", job, n, err)
	}
	t.Setenv(redisURLEnv, url)
	must(t, runCLI("inspect", "--prefix", prefix, job), exitOK, "no lock called")
	must(t, runCLI("ls", "--prefix", prefix), exitOK, "no locks under prefix") // a released lock leaves nothing
	must(t, runCLI("check"), exitOK, fmt.Sprintf("at master %q of sentinels 127.0.0.1:1,", st.MasterName()), "everything dlock needs is there")

	// The wrong password, and a master the Sentinels do not know: errors
	// that never show the password.
	bad := regexp.MustCompile(`s3cret|wrong`)
	for u, want := range map[string]string{
		strings.Replace(url, "s3cret", "wrong", 1): "WRONGPASS",
		strings.Replace(url, "/"+st.MasterName(), "/nosuchmaster", 1): `master "nosuchmaster" of sentinels 127.0.0.1:1,` +
			st.SentinelAddrs()[0] + ": the Sentinels that answer know no master of that name",
		"redis+sentinel://127.0.0.1:1/" + st.MasterName(): "sentinel 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused",
	} {
		t.Setenv(redisURLEnv, u)
		r := runCLI("ls", "--prefix", prefix)
		if r.code != exitFail || !strings.Contains(r.stderr, "cannot reach Redis at master ") || !strings.Contains(r.stderr, want) ||
			bad.MatchString(r.stderr) {
			t.Errorf("ls with a bad $%s: code %d, stderr %q; want 1, %q and no password", redisURLEnv, r.code, r.stderr, want)
		}
	}
}

// TestDemoOnTopologies runs the demo, workers and all, on the cluster
// (named by one node's redis:// URL) and on the master behind Sentinels.
func TestDemoOnTopologies(t *testing.T) {
	c, st := testCluster(t), testSentinel(t)
	for _, tc := range []struct{ name, url, on string }{
		{"cluster", "redis://" + c.Nodes()[1].Addr(), "on cluster " + c.Nodes()[1].Addr() + " (--redis)"},
		{"sentinel", "redis+sentinel://" + st.SentinelAddrs()[0] + "/" + st.MasterName(),
			fmt.Sprintf("on master %q of sentinels %s (--redis)", st.MasterName(), st.SentinelAddrs()[0])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI("demo", "--redis", tc.url, "--prefix", testPrefix(t), "--workers", "2", "--rounds", "3")
			checkDemo(t, r, "redis-server ")
			if !strings.Contains(r.stdout, tc.on) {
				t.Errorf("the demo does not say it runs %s:\n%s", tc.on, r.stdout)
			}
		})
	}
}
