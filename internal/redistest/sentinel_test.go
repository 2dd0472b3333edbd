package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// tcpProxy forwards connections to a target until it is cut: then every
// open connection is closed and new ones are closed on accept.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// track registers a connection pair, or closes it if the proxy is cut.
func (p *tcpProxy) track(in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		in.Close()
		out.Close()
		return false
	}
	p.conns[in], p.conns[out] = true, true
	return true
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cutAll closes every connection and refuses new ones.
func (p *tcpProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.cutAll()
	p.wg.Wait()
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	st := StartSentinelT(t, SentinelOptions{})
	t.Logf("sentinel topology started in %v", time.Since(t0))
	if st.MasterName() != "m" || len(st.SentinelAddrs()) != 3 || len(st.Nodes()) != 2 {
		t.Fatalf("name %q, %d sentinels, %d data nodes", st.MasterName(), len(st.SentinelAddrs()), len(st.Nodes()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	old, err := st.Master()
	if err != nil {
		t.Fatal(err)
	}
	if old != st.Nodes()[0] {
		t.Fatalf("Master = %s, want the initial master %s", old.Addr(), st.Nodes()[0].Addr())
	}
	reps, err := st.Replicas()
	if err != nil || len(reps) != 1 || reps[0] != st.Nodes()[1] {
		t.Fatalf("Replicas = %v, %v", reps, err)
	}

	fc := st.FailoverClient(func(o *redis.FailoverOptions) {
		o.DialTimeout = 300 * time.Millisecond
		o.ReadTimeout = time.Second
	})
	defer fc.Close()
	for i := range 20 {
		if err := fc.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := fc.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	if v, err := fc.Get(ctx, "k7").Int(); err != nil || v != 7 {
		t.Fatalf("GET k7 = %d, %v", v, err)
	}

	t0 = time.Now()
	if err := st.Failover(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER took %v", time.Since(t0))
	cur, err := st.Master()
	if err != nil {
		t.Fatal(err)
	}
	if cur == old || cur != st.Nodes()[1] {
		t.Fatalf("master after failover = %s (old %s)", cur.Addr(), old.Addr())
	}
	reps, err = st.Replicas()
	if err != nil || len(reps) != 1 || reps[0] != old {
		t.Fatalf("Replicas after failover = %v, %v; want the old master", reps, err)
	}

	// The client finds the new master; data acknowledged by WAIT 1 survived.
	d := eventually(t, 5*time.Second, func() error { return fc.Set(ctx, "after", 1, 0).Err() })
	t.Logf("failover client wrote again %v after Failover returned", d)
	for i := range 20 {
		if v, err := fc.Get(ctx, fmt.Sprint("k", i)).Int(); err != nil || v != i {
			t.Fatalf("GET k%d after failover = %d, %v", i, v, err)
		}
	}
	c := cur.Client()
	if r, err := role(c); err != nil || r.role != "master" {
		t.Fatalf("new master ROLE = %+v, %v", r, err)
	}
	c.Close()

	if testing.Short() || !Full() {
		t.Log("the old master's demotion and a kill -9 of the new one: only under ./test.sh --full (" + EnvFull + "=1)")
		return
	}
	// The sentinels turn the old master into a replica of the new one.
	t0 = time.Now()
	if err := st.WaitHealthy(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("old master converted to a replica %v after Failover returned", time.Since(t0))
	oc := old.Client()
	if r, err := role(oc); err != nil || r.role != "slave" || r.masterPort != cur.Port() {
		t.Fatalf("old master ROLE = %+v, %v", r, err)
	}
	oc.Close()

	// kill -9 of the master: the sentinels promote the replica on their own.
	reps, err = st.Replicas()
	if err != nil || len(reps) != 1 {
		t.Fatalf("Replicas = %v, %v", reps, err)
	}
	t0 = time.Now()
	if err := cur.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := st.WaitHealthy(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("kill -9 of master %s: sentinels promoted %s after %v", cur.Addr(), reps[0].Addr(), time.Since(t0))
	if m, err := st.Master(); err != nil || m != reps[0] {
		t.Fatalf("master after kill = %v, %v; want %s", m, err, reps[0].Addr())
	}
	d = eventually(t, 5*time.Second, func() error { return fc.Get(ctx, "after").Err() })
	t.Logf("failover client read again %v after WaitHealthy returned", d)

	var dirs []string
	for _, s := range append(st.Nodes(), st.Sentinels()...) {
		dirs = append(dirs, s.dir)
	}
	st.Close()
	st.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("dir %s still exists: %v", d, err)
		}
	}
}

// TestSentinelReplicaUpstream shows a replica that replicates through a
// proxy: it stays behind the proxy (the sentinels do not re-point it),
// cutting the proxy stops replication, and a failover then promotes a
// replica without the unreplicated write.
func TestSentinelReplicaUpstream(t *testing.T) {
	t.Parallel()
	var proxy *tcpProxy
	t0 := time.Now()
	st := StartSentinelT(t, SentinelOptions{
		MasterName: "mymaster",
		ReplicaUpstream: func(masterAddr string) string {
			proxy = newTCPProxy(t, masterAddr)
			return proxy.addr()
		},
	})
	t.Logf("sentinel topology with a proxied replica started in %v", time.Since(t0))
	replica := st.Nodes()[1]
	rc := replica.Client()
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The sentinels try to re-point the replica at the master (it
	// replicates from an address that is not the master's) at their first
	// INFO refresh at least failover-timeout after discovering it, about
	// 10s after the start; the pin makes that fail. That wait only under
	// ./test.sh --full; without it, the pin (NOPERM below) and the rest.
	if Full() {
		eventually(t, 15*time.Second, func() error {
			for _, s := range st.Sentinels() {
				if strings.Contains(s.Log(), "+fix-slave-config") {
					return nil
				}
			}
			return errors.New("no sentinel has tried +fix-slave-config yet")
		})
		t.Logf("sentinels tried to re-point the replica %v after the start", time.Since(t0))
		time.Sleep(200 * time.Millisecond)
	}
	inf, err := info(rc, "replication")
	if err != nil {
		t.Fatal(err)
	}
	if inf["master_port"] != strconv.Itoa(portOf(proxy.addr())) || inf["master_link_status"] != "up" {
		t.Fatalf("replica replicates from port %s (link %s), want the proxy %s",
			inf["master_port"], inf["master_link_status"], proxy.addr())
	}
	if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", st.Nodes()[0].Port()).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("REPLICAOF on a pinned replica: %v, want NOPERM", err)
	}

	fc := st.FailoverClient()
	defer fc.Close()
	if err := fc.Set(ctx, "kept", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := fc.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 through the proxy = %d, %v", n, err)
	}

	proxy.cutAll()
	if err := fc.Set(ctx, "lost", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := fc.Do(ctx, "WAIT", 1, 200).Int(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 with the link cut = %d, %v; want 0", n, err)
	}

	t0 = time.Now()
	if err := st.Failover(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SENTINEL FAILOVER with the replication link cut took %v", time.Since(t0))
	if m, err := st.Master(); err != nil || m != replica {
		t.Fatalf("master after failover = %v, %v; want the proxied replica", m, err)
	}
	if err := rc.Get(ctx, "kept").Err(); err != nil {
		t.Fatalf("acknowledged write missing on the promoted replica: %v", err)
	}
	if err := rc.Get(ctx, "lost").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("unreplicated write on the promoted replica: %v, want redis.Nil", err)
	}
	// The pin is lifted on the new master so that it can be demoted later.
	if u, err := rc.Do(ctx, "ACL", "LIST").StringSlice(); err != nil || strings.Contains(fmt.Sprint(u), "-slaveof") {
		t.Fatalf("ACL of the promoted replica: %v, %v", u, err)
	}
}

func TestSentinelPrepare(t *testing.T) {
	peers := []sentinelPeer{{id: strings.Repeat("a", 40), port: 1001}, {id: strings.Repeat("b", 40), port: 1002}}
	prep := sentinelPrepare(SentinelOptions{MasterName: "x", Quorum: 2, DownAfter: time.Second, FailoverTimeout: 2 * time.Second},
		1000, []int{1003}, peers, 1)
	s := &Server{dir: t.TempDir(), port: 5555}
	if err := prep(s); err != nil {
		t.Fatal(err)
	}
	if s.port != 1002 {
		t.Fatalf("port %d, want the planned 1002", s.port)
	}
	b, err := os.ReadFile(s.cmdline(false)[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"port 1002\n", "bind 127.0.0.1\n", "sentinel myid " + peers[1].id + "\n",
		"sentinel monitor x 127.0.0.1 1000 2\n", "sentinel down-after-milliseconds x 1000\n",
		"sentinel failover-timeout x 2000\n", "sentinel parallel-syncs x 1\n",
		"sentinel known-replica x 127.0.0.1 1003\n", "sentinel known-sentinel x 127.0.0.1 1001 " + peers[0].id + "\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), peers[1].id+"\n"+"sentinel known-sentinel") || strings.Count(string(b), "known-sentinel") != 1 {
		t.Errorf("config lists itself as a peer:\n%s", b)
	}
	if got := s.cmdline(false)[1]; got != "--sentinel" {
		t.Errorf("command line %v", s.cmdline(false))
	}
	if err := prep(s); !errors.Is(err, errPlannedPortTaken) {
		t.Fatalf("second attempt: %v, want errPlannedPortTaken", err)
	}
}
