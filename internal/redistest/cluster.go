package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/keyslot"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrNoCLI is returned by StartCluster when no redis-cli binary is found in
// PATH.
var ErrNoCLI = errors.New("redistest: redis-cli not found in PATH")

const (
	cliBinary = "redis-cli"
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds redis-cli --cluster create.
	clusterCreateTimeout = 30 * time.Second
	// clusterStartTimeout bounds the wait for a healthy cluster after
	// redis-cli has created it.
	clusterStartTimeout = 15 * time.Second
	// clusterFailoverTimeout bounds Cluster.Failover.
	clusterFailoverTimeout = 15 * time.Second
)

// ClusterOptions configures a cluster started by StartCluster. The zero
// value means 3 masters with 1 replica each.
type ClusterOptions struct {
	// Masters is the number of masters; 0 means 3. redis-cli refuses to
	// create a cluster with fewer than 3.
	Masters int
	// ReplicasPerMaster is the number of replicas of each master; 0 means
	// 1 and a negative value means none.
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout; 0 means 1s. A killed master is
	// replaced after roughly twice this.
	NodeTimeout time.Duration
	// AOF and Args apply to every node as in Options. Args come after the
	// harness's own flags and so override them.
	AOF  bool
	Args []string
}

// Cluster is a Redis Cluster of real redis-server processes owned by a
// test. Its methods are safe for concurrent use.
type Cluster struct {
	nodes []*Server
	admin admins

	closeOnce sync.Once
}

// StartCluster starts the nodes on free loopback ports (each with its own
// cluster bus port, passed as --cluster-port), joins them with redis-cli
// --cluster create and waits until the cluster is healthy (see
// WaitHealthy). On failure everything started so far is closed.
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.ReplicasPerMaster == 0 {
		opts.ReplicasPerMaster = 1
	} else if opts.ReplicasPerMaster < 0 {
		opts.ReplicasPerMaster = 0
	}
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = time.Second
	}
	if opts.Masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", opts.Masters)
	}
	cli, err := exec.LookPath(cliBinary)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCLI, err)
	}

	n := opts.Masters * (1 + opts.ReplicasPerMaster)
	c := &Cluster{nodes: make([]*Server, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = start(Options{AOF: opts.AOF, Args: opts.Args}, clusterNodePrepare(opts))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}

	if err := c.create(cli, opts.ReplicasPerMaster); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitHealthy(clusterStartTimeout); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartClusterT is StartCluster for tests: it fails the test if the
// cluster cannot be started and closes it when the test ends.
func StartClusterT(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterNodePrepare returns the start hook of a cluster node: it picks a
// free cluster bus port for the attempt and fixes the command line.
func clusterNodePrepare(opts ClusterOptions) func(s *Server) error {
	return func(s *Server) error {
		var cport int
		for cport == 0 || cport == s.port {
			p, err := FreePort()
			if err != nil {
				return err
			}
			cport = p
		}
		conf := filepath.Join(s.dir, "nodes.conf")
		// A failed attempt may have left a node identity behind.
		if err := os.Remove(conf); err != nil && !os.IsNotExist(err) {
			return err
		}
		extra := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", conf,
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(cport),
		}
		extra = append(extra, opts.Args...)
		port, dir := s.port, s.dir
		s.cmdline = func(aof bool) []string { return serverArgs(port, dir, aof, extra) }
		return nil
	}
}

// create runs redis-cli --cluster create over all nodes.
func (c *Cluster) create(cli string, replicas int) error {
	args := []string{"--cluster", "create"}
	for _, s := range c.nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	setDeathSignal(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %v; output:\n%s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Nodes returns every node in start order, whatever its current role and
// state.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Client returns a new go-redis cluster client seeded with every node's
// address, with opts applied to its options in order. The caller must close
// it.
//
// go-redis refreshes its slot map on MOVED replies and otherwise only every
// ClusterStateReloadInterval (60s by default): after a master was killed,
// call ReloadState on the client (or set a short interval) once
// WaitFailoverAfterKill has returned.
func (c *Cluster) Client(opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	// Maintenance notifications off: redis-server 7.0 refuses their
	// handshake, and go-redis 9.23's "auto" mode then rewrites its shared
	// options while another connection of the node reads them — a data
	// race inside go-redis that -race saw in TestClusterShake (a pub/sub
	// connection and a dedicated one opened at once on a moved slot).
	o := &redis.ClusterOptions{MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
	for _, s := range c.nodes {
		o.Addrs = append(o.Addrs, s.Addr())
	}
	for _, f := range opts {
		f(o)
	}
	return redis.NewClusterClient(o)
}

// Masters returns the running nodes that currently report the master role
// (ROLE), in start order. A master that has lost all its slots but not yet
// been reconfigured as a replica is included.
func (c *Cluster) Masters() ([]*Server, error) { return c.byRole("master") }

// Replicas returns the running nodes that currently report the replica
// role (ROLE), in start order.
func (c *Cluster) Replicas() ([]*Server, error) { return c.byRole("slave") }

// byRole returns the running nodes whose ROLE is r.
func (c *Cluster) byRole(r string) ([]*Server, error) {
	var out []*Server
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		ri, err := role(c.admin.get(s.Addr()))
		if err != nil {
			return nil, fmt.Errorf("redistest: ROLE on %s: %w", s.Addr(), err)
		}
		if ri.role == r {
			out = append(out, s)
		}
	}
	return out, nil
}

// MasterOf returns the master serving the hash slot of key, according to
// CLUSTER NODES as seen by the first running node that answers.
func (c *Cluster) MasterOf(key string) (*Server, error) {
	slot := KeySlot(key)
	var lastErr error
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		view, err := clusterNodes(c.admin.get(s.Addr()))
		if err != nil {
			lastErr = fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
			continue
		}
		for _, n := range view {
			if n.isMaster() && !n.failed() && n.serves(slot) {
				if srv := serverByPort(c.nodes, n.port); srv != nil {
					return srv, nil
				}
				return nil, fmt.Errorf("redistest: slot %d is served by unknown node %s", slot, n.addr)
			}
		}
		return nil, fmt.Errorf("redistest: no live master serves slot %d (key %q) in the view of %s", slot, key, s.Addr())
	}
	if lastErr == nil {
		lastErr = errNotRunning
	}
	return nil, fmt.Errorf("redistest: MasterOf(%q): %w", key, lastErr)
}

// ReplicaOf returns a running replica of master: the first node in start
// order whose ROLE names master's port as its master.
func (c *Cluster) ReplicaOf(master *Server) (*Server, error) {
	for _, s := range c.nodes {
		if s == master || !s.running() {
			continue
		}
		ri, err := role(c.admin.get(s.Addr()))
		if err != nil {
			return nil, fmt.Errorf("redistest: ROLE on %s: %w", s.Addr(), err)
		}
		if ri.role == "slave" && ri.masterPort == master.Port() {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: no running replica of %s", master.Addr())
}

// Failover runs CLUSTER FAILOVER on replica (a coordinated manual failover:
// its master stops accepting writes until the replica has caught up), then
// waits until the replica reports the master role and the cluster is
// healthy again. It takes about 0.1–0.5s. The replica's master must be up:
// after killing a master use WaitFailoverAfterKill instead.
func (c *Cluster) Failover(replica *Server) error {
	if !replica.running() {
		return fmt.Errorf("redistest: Failover: %s is not running", replica.Addr())
	}
	deadline := time.Now().Add(clusterFailoverTimeout)
	cl := c.admin.get(replica.Addr())
	ri, err := role(cl)
	if err != nil {
		return fmt.Errorf("redistest: ROLE on %s: %w", replica.Addr(), err)
	}
	if ri.role != "slave" {
		return fmt.Errorf("redistest: Failover: %s is a %s, not a replica", replica.Addr(), ri.role)
	}
	ctx, cancel := callCtx()
	err = cl.ClusterFailover(ctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER FAILOVER on %s: %w", replica.Addr(), err)
	}
	err = waitFor(time.Until(deadline), replica.Addr()+" to become master", func() error {
		ri, err := role(cl)
		if err != nil {
			return err
		}
		if ri.role != "master" {
			return fmt.Errorf("%s: role %s, link to master port %d %s", replica.Addr(), ri.role, ri.masterPort, ri.state)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.WaitHealthy(time.Until(deadline))
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots assigned and ok, knows every node, sees no running node
// as failed, agrees with the others on which master serves which slots and
// which replica follows which master, and, if it is a replica, has its replication link up. Nodes that are
// not running are ignored; a paused node makes it time out.
//
// Right after a master is killed the cluster still looks healthy until the
// failure is detected (about NodeTimeout): use WaitFailoverAfterKill there.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	return waitFor(timeout, "a healthy cluster", func() error { return c.check(nil) })
}

// WaitFailoverAfterKill waits until no running node assigns any slot to
// killed any more (so a replica has taken over its slots) and the cluster is
// healthy as defined by WaitHealthy. killed must not be running. With the
// default NodeTimeout this takes about 2–3s from the kill.
func (c *Cluster) WaitFailoverAfterKill(killed *Server, timeout time.Duration) error {
	if killed.running() {
		return fmt.Errorf("redistest: WaitFailoverAfterKill: %s is still running", killed.Addr())
	}
	return waitFor(timeout, "the slots of "+killed.Addr()+" to fail over", func() error { return c.check(killed) })
}

// check returns nil if the cluster is healthy and, when killed is not nil,
// no running node assigns slots to killed; otherwise it describes the
// first problem found.
func (c *Cluster) check(killed *Server) error {
	var refSig, refAddr string
	live := 0
	for _, s := range c.nodes {
		if !s.running() {
			continue
		}
		live++
		cl := c.admin.get(s.Addr())
		ctx, cancel := callCtx()
		raw, err := cl.ClusterInfo(ctx).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr(), err)
		}
		ci := parseInfo(raw)
		if ci["cluster_state"] != "ok" || ci["cluster_slots_assigned"] != strconv.Itoa(clusterSlots) || ci["cluster_slots_ok"] != strconv.Itoa(clusterSlots) {
			return fmt.Errorf("%s: cluster_state:%s slots_assigned:%s slots_ok:%s slots_pfail:%s slots_fail:%s",
				s.Addr(), ci["cluster_state"], ci["cluster_slots_assigned"], ci["cluster_slots_ok"], ci["cluster_slots_pfail"], ci["cluster_slots_fail"])
		}
		if ci["cluster_known_nodes"] != strconv.Itoa(len(c.nodes)) {
			return fmt.Errorf("%s: knows %s nodes of %d", s.Addr(), ci["cluster_known_nodes"], len(c.nodes))
		}
		view, err := clusterNodes(cl)
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
		}
		var me *clusterNodeEntry
		for i, n := range view {
			if n.has("myself") {
				me = &view[i]
			}
			srv := serverByPort(c.nodes, n.port)
			if n.failed() && srv != nil && srv.running() {
				return fmt.Errorf("%s: sees running node %s as %s", s.Addr(), n.addr, n.flags)
			}
			if killed != nil && n.port == killed.Port() && len(n.slots) > 0 {
				return fmt.Errorf("%s: killed node %s (%s) still has slots %s", s.Addr(), n.addr, n.flags, n.slotString())
			}
		}
		if me == nil {
			return fmt.Errorf("%s: no myself entry in CLUSTER NODES", s.Addr())
		}
		sig := viewSignature(view)
		if refAddr == "" {
			refSig, refAddr = sig, s.Addr()
		} else if sig != refSig {
			return fmt.Errorf("views differ: %s has [%s], %s has [%s]", refAddr, refSig, s.Addr(), sig)
		}
		if me.has("slave") {
			ri, err := info(cl, "replication")
			if err != nil {
				return fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
			}
			if ri["master_link_status"] != "up" || ri["master_sync_in_progress"] != "0" {
				return fmt.Errorf("%s: replica of port %s, master_link_status:%s master_sync_in_progress:%s",
					s.Addr(), ri["master_port"], ri["master_link_status"], ri["master_sync_in_progress"])
			}
		}
	}
	if live == 0 {
		return errors.New("no node is running")
	}
	return nil
}

// Close kills every node and removes their data directories. It is
// idempotent.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		c.admin.close()
		var wg sync.WaitGroup
		for _, s := range c.nodes {
			if s != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.Close()
				}()
			}
		}
		wg.Wait()
	})
}

// clusterNodeEntry is one line of CLUSTER NODES.
type clusterNodeEntry struct {
	id     string
	addr   string // host:port, without the bus port
	port   int
	flags  string // comma separated: myself, master, slave, fail?, fail, ...
	master string // id of the master for a replica, "-" otherwise
	slots  [][2]int
}

// has reports whether the entry carries flag f.
func (n clusterNodeEntry) has(f string) bool {
	for _, g := range strings.Split(n.flags, ",") {
		if g == f {
			return true
		}
	}
	return false
}

func (n clusterNodeEntry) isMaster() bool { return n.has("master") }

// failed reports whether the node is flagged as failing (PFAIL or FAIL).
func (n clusterNodeEntry) failed() bool { return n.has("fail") || n.has("fail?") }

// serves reports whether slot is among the node's slots.
func (n clusterNodeEntry) serves(slot int) bool {
	for _, r := range n.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// slotString formats the slot ranges like CLUSTER NODES does.
func (n clusterNodeEntry) slotString() string {
	parts := make([]string, len(n.slots))
	for i, r := range n.slots {
		if r[0] == r[1] {
			parts[i] = strconv.Itoa(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	return strings.Join(parts, ",")
}

// clusterNodes runs CLUSTER NODES on c and parses it.
func clusterNodes(c *redis.Client) ([]clusterNodeEntry, error) {
	ctx, cancel := callCtx()
	defer cancel()
	raw, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(raw)
}

// parseClusterNodes parses a CLUSTER NODES reply. Importing and migrating
// slot markers ("[...]") are skipped.
func parseClusterNodes(raw string) ([]clusterNodeEntry, error) {
	var out []clusterNodeEntry
	for _, line := range strings.Split(raw, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("short CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], ",") // drop ",hostname"
		addr, _, _ = strings.Cut(addr, "@")  // drop "@busport"
		n := clusterNodeEntry{id: f[0], addr: addr, port: portOf(addr), flags: f[2], master: f[3]}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("bad slot %q in %q", sl, line)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("bad slot %q in %q", sl, line)
				}
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// viewSignature summarises which address serves which slot ranges and
// which node replicates which master, in a form that compares equal across
// nodes with the same view of the cluster.
func viewSignature(view []clusterNodeEntry) string {
	ids := map[string]string{}
	for _, n := range view {
		ids[n.id] = n.addr
	}
	var parts []string
	for _, n := range view {
		switch {
		case n.has("slave"):
			parts = append(parts, n.addr+"->"+ids[n.master])
		case len(n.slots) > 0:
			parts = append(parts, n.addr+"="+n.slotString())
		default:
			parts = append(parts, n.addr+"=none")
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// KeySlot returns the Redis Cluster hash slot of key (see keyslot.Of).
func KeySlot(key string) int { return keyslot.Of(key) }

// MigrateSlot moves the hash slot of key from the master that serves it to
// the master to, as redis-cli --cluster reshard does: SETSLOT IMPORTING on
// to, MIGRATING on the source, MIGRATE of its keys, then SETSLOT NODE on
// both and the other masters. The source then sends its sharded
// subscribers of the slot's channels an sunsubscribe. It returns the
// source.
func (c *Cluster) MigrateSlot(key string, to *Server) (*Server, error) {
	from, err := c.MasterOf(key)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: MigrateSlot: %s serves slot %d already", to.Addr(), KeySlot(key))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterFailoverTimeout)
	defer cancel()
	src, dst := c.admin.get(from.Addr()), c.admin.get(to.Addr())
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", from.Addr(), err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", to.Addr(), err)
	}
	slot := KeySlot(key)
	steps := []struct {
		cl   *redis.Client
		args []any
	}{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
	}
	for _, s := range steps {
		if err := s.cl.Do(ctx, s.args...).Err(); err != nil {
			return nil, fmt.Errorf("redistest: %v: %w", s.args, err)
		}
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		// MIGRATE's own timeout stays below go-redis's 3 s read timeout;
		// a MIGRATE cut short (the destination busy with a failover, say)
		// is made again: the keys it moved are gone from the source.
		args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 2000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("redistest: MIGRATE of slot %d: %w", slot, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	masters, err := c.Masters()
	if err != nil {
		return nil, err
	}
	// The destination first, then the source (which then stops serving it
	// and unsubscribes its sharded subscribers), then the others.
	order := []*Server{to, from}
	for _, m := range masters {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if err := c.admin.get(m.Addr()).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d NODE on %s: %w", slot, m.Addr(), err)
		}
	}
	return from, nil
}
