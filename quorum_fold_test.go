package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// foldHold is a TCP proxy in front of one redis-server that holds the
// first command containing marker (every one, if always) on its way to
// the server, for hold (a path that stalls, then delivers), or resets
// its connection instead (reset). Everything else passes at once.
type foldHold struct {
	ln       net.Listener
	upstream string
	marker   []byte
	hold     time.Duration
	reset    bool
	always   bool // every command containing marker, not only the first
	armed    atomic.Bool
	hitOnce  sync.Once
	hit      chan struct{} // closed when the marked command came by
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newFoldHold(t *testing.T, upstream, marker string, hold time.Duration, reset, always bool) *foldHold {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &foldHold{ln: ln, upstream: upstream, marker: []byte(marker), hold: hold, reset: reset, always: always, hit: make(chan struct{})}
	p.armed.Store(true)
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *foldHold) addr() string { return p.ln.Addr().String() }

func (p *foldHold) keep(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *foldHold) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.keep(client)
		p.keep(server)
		p.wg.Go(func() {
			_, _ = io.Copy(client, server)
			_ = client.Close()
		})
		p.wg.Go(func() {
			defer server.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if bytes.Contains(buf[:n], p.marker) && (p.always || p.armed.CompareAndSwap(true, false)) {
						p.hitOnce.Do(func() { close(p.hit) })
						if p.reset {
							if tc, ok := client.(*net.TCPConn); ok {
								_ = tc.SetLinger(0)
							}
							_ = client.Close()
							return
						}
						time.Sleep(p.hold) // the fault: the path holds the command this long
					}
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// setOldCounters sets, on s, the counter of lock name that an older
// dlock kept per name (<prefix>:{<name>}:fence), at v.
func setOldCounters(t *testing.T, s *redistest.Server, prefix, name string, v int64) {
	t.Helper()
	k, err := dlock.KeysOf(prefix, name)
	if err != nil {
		t.Fatal(err)
	}
	admin := s.Client()
	defer admin.Close()
	if err := admin.Set(context.Background(), k.Lock+":fence", v, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// Issue 45, item 10: an older dlock's per-name counters at 50 on three of
// five nodes and 10 on two; a new Client's first fold command is held
// 150 ms on the three (node timeout 100 ms), so the fold fails there. No
// fence may come from the two folded nodes and three unfolded ones: every
// fence must be above 50 and strictly increasing. An acquire may fail
// meanwhile, with an error that says the fold is not done (a
// *QuorumError), and one later succeeds. Once with TryLocks, once with
// a Lock that waits through it.
func TestQuorumFencesWaitForTheFold(t *testing.T) {
	servers := redistest.StartNT(t, 5, redistest.Options{})
	for _, how := range []string{"TryLock", "Lock"} {
		t.Run(how, func(t *testing.T) {
			prefix := "fold45-" + how
			name := lockName(t)
			nodes := make([]*redis.Client, len(servers))
			holds := make([]*foldHold, 0, 3)
			for i, s := range servers {
				old := int64(10)
				addr := s.Addr()
				if i < 3 {
					old = 50
					p := newFoldHold(t, s.Addr(), prefix+":fence:folded", 150*time.Millisecond, false, false)
					holds = append(holds, p)
					addr = p.addr()
				}
				setOldCounters(t, s, prefix, name, old)
				nodes[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { _ = nodes[i].Close() })
			}
			c := quorumClient(t, nodes, dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithPrefix(prefix))
			m := c.Mutex(name)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			last, granted, refused := int64(50), 0, 0
			for granted < 3 && ctx.Err() == nil {
				var l *dlock.Lease
				var err error
				if how == "TryLock" {
					l, err = m.TryLock(ctx, dlock.WithLease(time.Second))
				} else {
					l, err = m.Lock(ctx, dlock.WithLease(time.Second))
				}
				if err != nil {
					if _, ok := errors.AsType[*dlock.QuorumError](err); !ok {
						t.Fatalf("%s: %v; want a lease, or a *QuorumError while the fold is not done", how, err)
					}
					refused++
					t.Logf("%s refused: %v", how, err)
					continue
				}
				if l.Fence() <= last {
					t.Errorf("%s: fence %d after %d (older fences went up to 50 on nodes 0-2)", how, l.Fence(), last)
				}
				last = max(last, l.Fence())
				granted++
				unlock(t, l)
			}
			for i, p := range holds {
				select {
				case <-p.hit:
				default:
					t.Errorf("node %d: the fold's first command never came by the proxy", i)
				}
			}
			if granted < 3 {
				t.Fatalf("%s: %d grants (%d refused) in 10 s after the fold was held on nodes 0-2", how, granted, refused)
			}
			t.Logf("%s: %d refused before %d grants, last fence %d", how, refused, granted, last)
		})
	}
}

// The same fold on a single node (issue 45, 10, "is a fold error there
// handled?"): an older counter at 50; the new Client's first fold
// command held past the first TryLock's ctx, or its connection reset.
// The acquire may fail (its ctx's error, or the fold's), never take a
// fence at or below 50; a later one takes one above.
func TestFoldFailedOnASingleNode(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "reset"}[reset], func(t *testing.T) {
			s := redistest.StartT(t, redistest.Options{})
			prefix, name := "fold45", lockName(t)
			setOldCounters(t, s, prefix, name, 50)
			p := newFoldHold(t, s.Addr(), prefix+":fence:folded", 300*time.Millisecond, reset, false)
			rdb := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClient(t, rdb, dlock.WithPrefix(prefix))
			m := c.Mutex(name)
			short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			l, err := m.TryLock(short)
			cancel()
			if err == nil {
				unlock(t, l)
				if l.Fence() <= 50 {
					t.Fatalf("fence %d with the fold's first command held or reset; older fences went up to 50", l.Fence())
				}
			} else {
				t.Logf("first TryLock: %v", err)
			}
			<-p.hit
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l = mustLock(t, m, ctx)
			unlock(t, l)
			if l.Fence() <= 50 {
				t.Fatalf("fence %d after the fold's first command was held or reset; older fences went up to 50", l.Fence())
			}
		})
	}
}

// A majority of the quorum folded is not enough: the nodes that decide a
// fence must be. Older counters at 50 on nodes 0, 3 and 4 (a majority
// the older dlock wrote a fence to) and 10 on 1 and 2; every node marked
// (an older dlock that marked its nodes). The new Client folds nodes 0-2
// (its first acquire finds the lock held: no fence), never 3 and 4
// (every fold command held past the node timeout there); then 0 and 1
// are cut off. A round on {2, 3, 4} may not fence from node 2's 10 and
// the unfolded 3 and 4; once 0 and 1 are back, the fence is above 50.
func TestQuorumFenceFromAFoldedMajorityOfItsDeciders(t *testing.T) {
	servers := redistest.StartNT(t, 5, redistest.Options{})
	prefix, name := "fold45-deciders", lockName(t)
	nodes := make([]*redis.Client, len(servers))
	cut := make([]*faultproxy.Proxy, 2)
	for i, s := range servers {
		setOldCounters(t, s, prefix, name, map[bool]int64{true: 50, false: 10}[i == 0 || i >= 3])
		admin := s.Client()
		if err := admin.Set(context.Background(), prefix+":quorum:mark", 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_ = admin.Close()
		addr := s.Addr()
		switch {
		case i < 2:
			p, err := faultproxy.New(s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			cut[i], addr = p, p.Addr()
		case i >= 3:
			addr = newFoldHold(t, s.Addr(), prefix+":fence:folded", 150*time.Millisecond, false, true).addr()
		}
		nodes[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	c := quorumClient(t, nodes, dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithPrefix(prefix))
	ctx := context.Background()
	held := name + "-held"
	k, _ := dlock.KeysOf(prefix, held)
	for _, s := range servers { // held on every node: the round fences nothing
		admin := s.Client()
		_ = putHold(ctx, admin, k.Lock, "foreign", time.Minute)
		_ = admin.Close()
	}
	if _, err := c.Mutex(held).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a lock held on every node: %v", err)
	}
	for _, p := range cut {
		p.SetDown(true)
	}
	m := c.Mutex(name)
	l, err := m.TryLock(ctx, dlock.WithLease(time.Second))
	if err == nil {
		unlock(t, l)
		if l.Fence() <= 50 {
			t.Fatalf("fence %d on {2, 3, 4}, 3 and 4 not folded; the older dlock issued 50 on {0, 3, 4}", l.Fence())
		}
	} else if _, ok := errors.AsType[*dlock.QuorumError](err); !ok {
		t.Fatalf("TryLock on {2, 3, 4}: %v; want a lease above 50 or a *QuorumError", err)
	} else {
		t.Logf("TryLock on {2, 3, 4} refused: %v", err)
	}
	for _, p := range cut {
		p.SetDown(false)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l = mustLock(t, m, wctx, dlock.WithLease(time.Second))
	unlock(t, l)
	if l.Fence() <= 50 {
		t.Fatalf("fence %d with every node back; the older dlock issued 50 on {0, 3, 4}", l.Fence())
	}
}
