package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelStartTimeout bounds the wait for a settled topology in
	// StartSentinel.
	sentinelStartTimeout = 15 * time.Second
	// sentinelFailoverTimeout bounds Sentinel.Failover.
	sentinelFailoverTimeout = 20 * time.Second
	sentinelConfName        = "sentinel.conf"
)

// pinArgs restrict the default user of a replica that replicates through a
// custom upstream so that nobody, the sentinels included, can re-point it
// (REPLICAOF host port), while promoting it (REPLICAOF NO ONE) still works.
// Without it the sentinels "fix" the replica's configuration (they see it
// replicating from an address that is not the master's) at their first
// INFO refresh at least failover-timeout after discovering it, about 10s
// after the start, and the upstream (a test proxy) is bypassed from then on.
var pinArgs = []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all",
	"-slaveof", "+slaveof|no", "-replicaof", "+replicaof|no"}

// SentinelOptions configures a topology started by StartSentinel. The zero
// value means one master, one replica and three sentinels with quorum 2.
type SentinelOptions struct {
	// MasterName is the name the sentinels monitor the master under; ""
	// means "m".
	MasterName string
	// Replicas is the number of replicas; 0 means 1 and a negative value
	// means none.
	Replicas int
	// Sentinels is the number of Sentinel processes; 0 means 3.
	Sentinels int
	// Quorum is the number of sentinels that must agree the master is
	// down; 0 means a majority of Sentinels.
	Quorum int
	// DownAfter is down-after-milliseconds; 0 means 1s.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout; 0 means 2s.
	FailoverTimeout time.Duration
	// AOF and Args apply to the master and the replicas as in Options;
	// Args come after the harness's own flags.
	AOF  bool
	Args []string
	// ReplicaUpstream, if set, is called once per replica, in order, with
	// the master's address and returns the address the replica replicates
	// from, typically a test proxy in front of the master. nil (or
	// returning masterAddr) means the master itself.
	//
	// A replica with another upstream is pinned: its default user may not
	// run REPLICAOF/SLAVEOF except with NO ONE, so the sentinels can promote
	// it but not re-point it at the master (which they otherwise do about
	// 10s after the start). Failover and WaitHealthy lift the pin once such
	// a replica has become the master; Restart brings it back as a pinned
	// replica of the upstream. While pinned it is not re-pointed by a
	// failover to another replica either: it keeps following the upstream.
	//
	// The sentinels refuse to promote a replica whose link has been down
	// for more than 10 × DownAfter (10s by default): cut the link shortly
	// before the failover.
	ReplicaUpstream func(masterAddr string) string
}

// Sentinel is a master, its replicas and the Sentinel processes monitoring
// them, all real processes owned by a test. Its methods are safe for
// concurrent use.
type Sentinel struct {
	name      string
	data      []*Server // the initial master first, then the replicas
	sentinels []*Server
	admin     admins

	mu     sync.Mutex
	pinned map[*Server]bool

	closeOnce sync.Once
}

// StartSentinel starts the master, the replicas (--replicaof) and the
// sentinels (redis-server sentinel.conf --sentinel, each with a writable
// configuration in its own directory) on free loopback ports and waits
// until the topology is settled (see WaitHealthy). On failure everything
// started so far is closed.
func StartSentinel(opts SentinelOptions) (*Sentinel, error) {
	if opts.MasterName == "" {
		opts.MasterName = "m"
	}
	if strings.ContainsAny(opts.MasterName, " \t\r\n\"'") {
		return nil, fmt.Errorf("redistest: bad master name %q", opts.MasterName)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	} else if opts.Replicas < 0 {
		opts.Replicas = 0
	}
	if opts.Sentinels <= 0 {
		opts.Sentinels = 3
	}
	if opts.Quorum <= 0 {
		opts.Quorum = opts.Sentinels/2 + 1
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = 2 * time.Second
	}

	st := &Sentinel{name: opts.MasterName, pinned: map[*Server]bool{}}
	master, err := Start(Options{AOF: opts.AOF, Args: opts.Args})
	if err != nil {
		return nil, err
	}
	st.data = append(st.data, master)

	// The sentinels discover replicas from the master's INFO, which they
	// refresh only every 10s: start them once the replicas are connected.
	var jobs []startJob
	for range opts.Replicas {
		up := master.Addr()
		if opts.ReplicaUpstream != nil {
			up = opts.ReplicaUpstream(master.Addr())
		}
		host, port, err := net.SplitHostPort(up)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("redistest: bad replica upstream %q: %w", up, err)
		}
		args := []string{"--replicaof", host, port}
		pin := up != master.Addr()
		if pin {
			args = append(args, pinArgs...)
		}
		jobs = append(jobs, startJob{opts: Options{AOF: opts.AOF, Args: append(args, opts.Args...)}, pinned: pin})
	}
	replicas, err := startAll(jobs)
	for i, s := range replicas {
		if s != nil {
			st.data = append(st.data, s)
			if jobs[i].pinned {
				st.pinned[s] = true
			}
		}
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	err = waitFor(sentinelStartTimeout, "the replicas to sync", func() error {
		for _, s := range st.data[1:] {
			inf, err := info(st.admin.get(s.Addr()), "replication")
			if err != nil {
				return fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
			}
			if inf["master_link_status"] != "up" || inf["master_sync_in_progress"] != "0" {
				return fmt.Errorf("%s: master_link_status:%s master_sync_in_progress:%s", s.Addr(), inf["master_link_status"], inf["master_sync_in_progress"])
			}
		}
		return nil
	})
	if err != nil {
		st.Close()
		return nil, err
	}

	var replicaPorts []int
	for _, s := range st.data[1:] {
		replicaPorts = append(replicaPorts, s.Port())
	}
	st.sentinels, err = startSentinels(opts, master.Port(), replicaPorts)
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := st.WaitHealthy(sentinelStartTimeout); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// startJob is one server for startAll.
type startJob struct {
	opts    Options
	prepare func(*Server) error
	pinned  bool
}

// startAll starts the servers of jobs concurrently. The result has one
// entry per job, nil where starting failed; the error joins all failures.
func startAll(jobs []startJob) ([]*Server, error) {
	servers := make([]*Server, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = start(j.opts, j.prepare)
		}()
	}
	wg.Wait()
	return servers, errors.Join(errs...)
}

// StartSentinelT is StartSentinel for tests: it fails the test if the
// topology cannot be started and closes it when the test ends.
func StartSentinelT(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	st, err := StartSentinel(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// errPlannedPortTaken reports that a sentinel could not listen on the port
// the others were told about.
var errPlannedPortTaken = errors.New("redistest: planned sentinel port taken")

// startSentinels starts the Sentinel processes concurrently. Each one is
// told the others (ports and ids chosen here) and the replicas up front:
// discovering them through hello messages alone takes a 2s publish period.
// If a sentinel cannot get its planned port, all are stopped and a new plan
// is made, so that no sentinel expects a peer where another process now
// listens.
func startSentinels(opts SentinelOptions, masterPort int, replicaPorts []int) ([]*Server, error) {
	for try := 1; ; try++ {
		ports, err := freePorts(opts.Sentinels)
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		peers := make([]sentinelPeer, opts.Sentinels)
		for i := range peers {
			peers[i].port = ports[i]
			if peers[i].id, err = randomRunID(); err != nil {
				return nil, err
			}
		}
		jobs := make([]startJob, len(peers))
		for i := range jobs {
			jobs[i].prepare = sentinelPrepare(opts, masterPort, replicaPorts, peers, i)
		}
		servers, err := startAll(jobs)
		if err == nil {
			return servers, nil
		}
		for _, s := range servers {
			if s != nil {
				s.Close()
			}
		}
		if !errors.Is(err, errPlannedPortTaken) || try == startTries {
			return nil, err
		}
	}
}

// sentinelPeer is the identity given to a Sentinel process up front.
type sentinelPeer struct {
	id   string
	port int
}

// randomRunID returns a random 40-character hex id, the form of a
// sentinel's myid.
func randomRunID() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// sentinelPrepare returns the start hook of Sentinel process self of peers:
// it writes a fresh configuration for its planned port and runs the server
// in Sentinel mode on it. A second attempt (after a port clash) fails with
// errPlannedPortTaken.
func sentinelPrepare(opts SentinelOptions, masterPort int, replicaPorts []int, peers []sentinelPeer, self int) func(*Server) error {
	attempt := 0
	return func(s *Server) error {
		attempt++
		if attempt > 1 {
			return fmt.Errorf("%w: %d", errPlannedPortTaken, peers[self].port)
		}
		s.port = peers[self].port
		name := opts.MasterName
		var b strings.Builder
		fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n", s.port, s.dir)
		fmt.Fprintf(&b, "sentinel myid %s\n", peers[self].id)
		fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", name, masterPort, opts.Quorum)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", name, opts.DownAfter.Milliseconds())
		fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", name, opts.FailoverTimeout.Milliseconds())
		fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", name)
		for _, p := range replicaPorts {
			fmt.Fprintf(&b, "sentinel known-replica %s 127.0.0.1 %d\n", name, p)
		}
		for i, p := range peers {
			if i != self {
				fmt.Fprintf(&b, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", name, p.port, p.id)
			}
		}
		conf := filepath.Join(s.dir, sentinelConfName)
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			return err
		}
		s.cmdline = func(bool) []string { return []string{conf, "--sentinel"} }
		return nil
	}
}

// MasterName returns the name the sentinels monitor the master under.
func (st *Sentinel) MasterName() string { return st.name }

// SentinelAddrs returns the addresses of all Sentinel processes.
func (st *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(st.sentinels))
	for i, s := range st.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Sentinels returns the Sentinel processes, for instance to kill or pause
// one. Their Client speaks to the sentinel (SENTINEL commands); Restart
// starts a sentinel again with the configuration it has rewritten, so it
// keeps its identity and what it knew.
func (st *Sentinel) Sentinels() []*Server {
	return append([]*Server(nil), st.sentinels...)
}

// Nodes returns the data nodes: the initial master first, then the
// replicas in start order, whatever their current roles.
func (st *Sentinel) Nodes() []*Server {
	return append([]*Server(nil), st.data...)
}

// FailoverClient returns a new go-redis client that finds the master
// through the sentinels (redis.NewFailoverClient), with opts applied to its
// options in order. The caller must close it.
func (st *Sentinel) FailoverClient(opts ...func(*redis.FailoverOptions)) *redis.Client {
	o := &redis.FailoverOptions{MasterName: st.name, SentinelAddrs: st.SentinelAddrs()}
	for _, f := range opts {
		f(o)
	}
	return redis.NewFailoverClient(o)
}

// sentinelView is what one sentinel reports about the monitored master.
type sentinelView struct {
	sentinel *Server
	addr     string // master address
	flags    string
	epoch    int64
}

// views asks every running sentinel for its view of the master.
func (st *Sentinel) views() ([]sentinelView, error) {
	var out []sentinelView
	var lastErr error
	for _, s := range st.sentinels {
		if !s.running() {
			continue
		}
		ctx, cancel := callCtx()
		cmd := redis.NewMapStringStringCmd(ctx, "sentinel", "master", st.name)
		err := st.admin.get(s.Addr()).Process(ctx, cmd)
		cancel()
		if err != nil {
			lastErr = fmt.Errorf("SENTINEL MASTER on %s: %w", s.Addr(), err)
			continue
		}
		m := cmd.Val()
		epoch, _ := strconv.ParseInt(m["config-epoch"], 10, 64)
		out = append(out, sentinelView{
			sentinel: s,
			addr:     net.JoinHostPort(m["ip"], m["port"]),
			flags:    m["flags"],
			epoch:    epoch,
		})
	}
	if len(out) == 0 {
		if lastErr == nil {
			lastErr = errors.New("no sentinel is running")
		}
		return nil, lastErr
	}
	return out, nil
}

// current returns the view with the highest configuration epoch and the
// data node it names.
func (st *Sentinel) current() (sentinelView, *Server, error) {
	vs, err := st.views()
	if err != nil {
		return sentinelView{}, nil, err
	}
	best := vs[0]
	for _, v := range vs[1:] {
		if v.epoch > best.epoch {
			best = v
		}
	}
	srv := serverByPort(st.data, portOf(best.addr))
	if srv == nil {
		return best, nil, fmt.Errorf("sentinel %s reports unknown master %s", best.sentinel.Addr(), best.addr)
	}
	return best, srv, nil
}

// Master returns the current master as the sentinels report it: the
// address given by the sentinel with the highest configuration epoch.
func (st *Sentinel) Master() (*Server, error) {
	_, srv, err := st.current()
	if err != nil {
		return nil, fmt.Errorf("redistest: Master: %w", err)
	}
	return srv, nil
}

// Replicas returns the data nodes that the sentinel with the highest
// configuration epoch lists as replicas of the current master (SENTINEL
// REPLICAS), in start order, including ones it flags as down. Right after
// a failover the old master is listed although it may still report the
// master role for a few seconds, until the sentinels convert it.
func (st *Sentinel) Replicas() ([]*Server, error) {
	v, master, err := st.current()
	if err != nil {
		return nil, fmt.Errorf("redistest: Replicas: %w", err)
	}
	list, err := st.replicaList(v.sentinel)
	if err != nil {
		return nil, fmt.Errorf("redistest: Replicas: %w", err)
	}
	var out []*Server
	for _, s := range st.data {
		if s == master {
			continue
		}
		if _, ok := list[s.Port()]; ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// replicaList runs SENTINEL REPLICAS on sentinel and indexes the entries
// by port.
func (st *Sentinel) replicaList(sentinel *Server) (map[int]map[string]string, error) {
	ctx, cancel := callCtx()
	defer cancel()
	cmd := redis.NewMapStringStringSliceCmd(ctx, "sentinel", "replicas", st.name)
	if err := st.admin.get(sentinel.Addr()).Process(ctx, cmd); err != nil {
		return nil, fmt.Errorf("SENTINEL REPLICAS on %s: %w", sentinel.Addr(), err)
	}
	out := map[int]map[string]string{}
	for _, m := range cmd.Val() {
		p, _ := strconv.Atoi(m["port"])
		out[p] = m
	}
	return out, nil
}

// Failover runs SENTINEL FAILOVER and waits until every running sentinel
// reports the same master, different from the one before, and that node
// reports the master role. The old master keeps the master role until the
// sentinels convert it to a replica, several seconds later; WaitHealthy
// waits for that.
func (st *Sentinel) Failover() error {
	deadline := time.Now().Add(sentinelFailoverTimeout)
	old, err := st.Master()
	if err != nil {
		return err
	}
	// SENTINEL FAILOVER fails with NOGOODSLAVE while no sentinel has fresh
	// INFO from a replica (for instance right after a previous failover):
	// retry that; INPROG means a failover is already under way.
	err = waitFor(time.Until(deadline), "SENTINEL FAILOVER to be accepted", func() error {
		for _, s := range st.sentinels {
			if !s.running() {
				continue
			}
			ctx, cancel := callCtx()
			err := st.admin.get(s.Addr()).Do(ctx, "SENTINEL", "FAILOVER", st.name).Err()
			cancel()
			if err == nil || strings.HasPrefix(err.Error(), "INPROG") {
				return nil
			}
			return fmt.Errorf("SENTINEL FAILOVER on %s: %w", s.Addr(), err)
		}
		return errors.New("no sentinel is running")
	})
	if err != nil {
		return err
	}
	var master *Server
	err = waitFor(time.Until(deadline), "the sentinels to agree on a new master", func() error {
		vs, err := st.views()
		if err != nil {
			return err
		}
		for _, v := range vs {
			if v.addr != vs[0].addr {
				return fmt.Errorf("sentinel %s reports %s, sentinel %s reports %s",
					vs[0].sentinel.Addr(), vs[0].addr, v.sentinel.Addr(), v.addr)
			}
		}
		if vs[0].addr == old.Addr() {
			return fmt.Errorf("sentinels still report the old master %s", old.Addr())
		}
		master = serverByPort(st.data, portOf(vs[0].addr))
		if master == nil {
			return fmt.Errorf("sentinels report unknown master %s", vs[0].addr)
		}
		ri, err := role(st.admin.get(master.Addr()))
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", master.Addr(), err)
		}
		if ri.role != "master" {
			return fmt.Errorf("new master %s still reports role %s", master.Addr(), ri.role)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return st.unpin(master)
}

// unpin lifts the REPLICAOF restriction of a pinned replica that has
// become the master, so that the sentinels can demote it later.
func (st *Sentinel) unpin(master *Server) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.pinned[master] {
		return nil
	}
	ctx, cancel := callCtx()
	defer cancel()
	if err := st.admin.get(master.Addr()).Do(ctx, "ACL", "SETUSER", "default", "+slaveof", "+replicaof").Err(); err != nil {
		return fmt.Errorf("redistest: unpin %s: %w", master.Addr(), err)
	}
	delete(st.pinned, master)
	return nil
}

// isPinned reports whether s is a replica pinned to a custom upstream.
func (st *Sentinel) isPinned(s *Server) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pinned[s]
}

// WaitHealthy waits until the topology is settled: every running sentinel
// reports the same master with no down or failover flags and knows every
// other running sentinel; that master reports the master role; every other
// running data node is a replica of it (or, if pinned, of its upstream)
// with its link up and no sync in progress; and every running sentinel
// lists those replicas as failover candidates (flagged "slave" only, not
// down or disconnected, INFO received). Processes that are not running are
// ignored; a paused one makes it time out.
//
// After a Failover it returns once the sentinels have converted the old
// master into a replica, about 10s later. After the master was killed it
// returns once the sentinels have promoted a replica; the killed node is
// ignored until it is restarted.
func (st *Sentinel) WaitHealthy(timeout time.Duration) error {
	return waitFor(timeout, "a settled Sentinel topology", st.check)
}

// check returns nil if the topology is settled, or the first problem found.
func (st *Sentinel) check() error {
	vs, err := st.views()
	if err != nil {
		return err
	}
	for _, v := range vs {
		if v.addr != vs[0].addr {
			return fmt.Errorf("sentinel %s reports master %s, sentinel %s reports %s",
				vs[0].sentinel.Addr(), vs[0].addr, v.sentinel.Addr(), v.addr)
		}
		if v.flags != "master" {
			return fmt.Errorf("sentinel %s flags master %s as %s", v.sentinel.Addr(), v.addr, v.flags)
		}
	}
	master := serverByPort(st.data, portOf(vs[0].addr))
	if master == nil {
		return fmt.Errorf("sentinels report unknown master %s", vs[0].addr)
	}
	if !master.running() {
		return fmt.Errorf("master %s reported by the sentinels is not running", master.Addr())
	}
	ri, err := role(st.admin.get(master.Addr()))
	if err != nil {
		return fmt.Errorf("ROLE on master %s: %w", master.Addr(), err)
	}
	if ri.role != "master" {
		return fmt.Errorf("master %s reports role %s", master.Addr(), ri.role)
	}
	if err := st.unpin(master); err != nil {
		return err
	}

	var replicas []*Server
	for _, s := range st.data {
		if s == master || !s.running() {
			continue
		}
		replicas = append(replicas, s)
		inf, err := info(st.admin.get(s.Addr()), "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", s.Addr(), err)
		}
		if inf["role"] != "slave" {
			return fmt.Errorf("%s reports role %s, want a replica of %s", s.Addr(), inf["role"], master.Addr())
		}
		if inf["master_port"] != strconv.Itoa(master.Port()) && !st.isPinned(s) {
			return fmt.Errorf("%s replicates from port %s, not from master %s", s.Addr(), inf["master_port"], master.Addr())
		}
		if inf["master_link_status"] != "up" || inf["master_sync_in_progress"] != "0" {
			return fmt.Errorf("%s: master_link_status:%s master_sync_in_progress:%s", s.Addr(), inf["master_link_status"], inf["master_sync_in_progress"])
		}
	}

	for _, v := range vs {
		list, err := st.replicaList(v.sentinel)
		if err != nil {
			return err
		}
		for _, r := range replicas {
			e, ok := list[r.Port()]
			if !ok {
				return fmt.Errorf("sentinel %s does not list replica %s", v.sentinel.Addr(), r.Addr())
			}
			// A sentinel refreshes a replica's INFO only every 10s, so its
			// cached link status and role lag; require what makes the
			// replica a failover candidate: not flagged down or
			// disconnected, and INFO received (info-refresh is the age of
			// the last reply, huge before the first one).
			refresh, err := strconv.ParseInt(e["info-refresh"], 10, 64)
			if e["flags"] != "slave" || err != nil || refresh > 30000 {
				return fmt.Errorf("sentinel %s sees replica %s: flags %s, info-refresh %s",
					v.sentinel.Addr(), r.Addr(), e["flags"], e["info-refresh"])
			}
		}
		ctx, cancel := callCtx()
		cmd := redis.NewMapStringStringSliceCmd(ctx, "sentinel", "sentinels", st.name)
		err = st.admin.get(v.sentinel.Addr()).Process(ctx, cmd)
		cancel()
		if err != nil {
			return fmt.Errorf("SENTINEL SENTINELS on %s: %w", v.sentinel.Addr(), err)
		}
		known := map[int]string{}
		for _, m := range cmd.Val() {
			p, _ := strconv.Atoi(m["port"])
			known[p] = m["flags"]
		}
		for _, o := range st.sentinels {
			if o == v.sentinel || !o.running() {
				continue
			}
			// master_down only caches that peer's last opinion of the
			// master (kept for 5s after a failover); it is not a health
			// problem.
			if flags, ok := known[o.Port()]; !ok || strings.TrimSuffix(flags, ",master_down") != "sentinel" {
				return fmt.Errorf("sentinel %s sees sentinel %s as %q", v.sentinel.Addr(), o.Addr(), flags)
			}
		}
	}
	return nil
}

// Close kills every process and removes their directories. It is
// idempotent.
func (st *Sentinel) Close() {
	st.closeOnce.Do(func() {
		st.admin.close()
		var wg sync.WaitGroup
		for _, s := range append(append([]*Server(nil), st.sentinels...), st.data...) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Close()
			}()
		}
		wg.Wait()
	})
}
