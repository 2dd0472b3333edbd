package goredis

import (
	"context"
	"errors"
	"maps"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// clusterWire is dlock's own connections to a cluster's masters
// (internal/wire, one Mux a master), for a *redis.ClusterClient's keyed
// commands: what Own gives a plain client — calls bound by their ctx on
// the caller's goroutine, many goroutines' calls in one write, nothing
// sent twice — on every node. A command goes to the master of its first
// key's slot: go-redis's slot map says which, unless a MOVED reply has
// said since (moved: a redirect is fresher than go-redis's map, which
// reloads at most every 200 ms). A MOVED reply is followed at once (the
// command did not run where it was refused), and an ASK (a slot being
// migrated) is sent on as ASKING and the command, together, to the node
// it names; up to maxRedirects. Other transient answers (TRYAGAIN,
// CLUSTERDOWN, a dead master) come back to the Client, which refreshes
// the map and tries again (internal/transport/topology.go, "Topology changes"). A keyless
// command (PING, TIME) goes to the master of slot 0, as any master would
// do; pub/sub, NodeOf and Masters stay with go-redis.
type clusterWire struct {
	cc *redis.ClusterClient

	mu     sync.Mutex
	tmpl   *redis.Options     // a master's options, each Mux's made from it with the master's address
	muxes  map[string]*master // by master address
	moved  map[int]movedTo    // slot -> master address, from MOVED replies
	swept  time.Time          // when forget last closed the Muxes no call used (sweep)
	closed bool
	// loaded: go-redis has had its slot map (MasterForKey loads it, with
	// reads that only its timeouts bound, when it has none; afterwards it
	// reloads in the background and answers at once).
	loaded atomic.Bool
	// gone: cc was found closed (goneNow); the Muxes are closed and every
	// call fails with ErrClientClosed.
	gone atomic.Bool
}

// master is the Mux of one master's address, and whether a call was sent
// through it since the last sweep (under clusterWire.mu).
type master struct {
	m    *wire.Mux
	used bool
}

// sweepEvery: forget closes, at most this often, the Muxes that no call
// used since it last did (a master that left the cluster, failed over or
// removed, is no longer in go-redis's map, so no call goes there; its Mux
// would otherwise keep its connections until Close). A Mux of a master
// still in the cluster that no call used for that long is closed too; the
// next call to it makes another. A variable for tests.
var sweepEvery = time.Minute

// movedTo is where a MOVED reply said a slot is, until when it is
// believed over go-redis's map (movedFor): the map, reloaded meanwhile,
// takes over, and a redirect says again where a slot went. Never for
// good: an address can come to mean another server.
type movedTo struct {
	addr  string
	until time.Time
}

// movedFor is how long a MOVED reply is believed over go-redis's map.
const movedFor = 5 * time.Second

// maxRedirects bounds the MOVED and ASK replies one command follows
// (go-redis's MaxRedirects default).
const maxRedirects = 3

// ownCluster returns the clusterWire of cc, or nil when its nodes' options
// do not allow dlock's own connections (an OnConnect hook or streaming
// credentials, which only go-redis's pool runs; a slot map of the
// caller's, ClusterSlots, whose nodes are not a cluster's): see Own.
func ownCluster(cc *redis.ClusterClient) *clusterWire {
	o := cc.Options()
	if o.OnConnect != nil || o.StreamingCredentialsProvider != nil || o.ClusterSlots != nil ||
		(o.NewClient != nil && reflect.ValueOf(o.NewClient).Pointer() != reflect.ValueOf(redis.NewClient).Pointer()) {
		// (a NewClient of the caller's may make each node's client its own way)
		return nil
	}
	return &clusterWire{cc: cc, muxes: map[string]*master{}, moved: map[int]movedTo{}, swept: time.Now()}
}

// firstKey is c's first key: "" (slot 0) for a keyless command.
func firstKey(c driver.Command) string {
	if c.Keys == 0 || c.FirstKey >= len(c.Args) {
		return ""
	}
	switch k := c.Args[c.FirstKey].(type) {
	case string:
		return k
	case []byte:
		return string(k)
	}
	return ""
}

// route returns the Mux of the master of key's slot, and its address.
func (w *clusterWire) route(ctx context.Context, key string) (*wire.Mux, string, error) {
	slot := keyslot.Of(key)
	w.mu.Lock()
	mv, ok := w.moved[slot]
	if ok && time.Now().After(mv.until) {
		delete(w.moved, slot)
		ok = false
	}
	addr := mv.addr
	known := w.tmpl != nil
	w.mu.Unlock()
	if !ok || !known {
		n, err := w.masterFor(ctx, key)
		if err != nil {
			return nil, "", err
		}
		o := n.Options()
		if !ok {
			addr = o.Addr
		}
		if !known {
			if o.Dialer == nil {
				return nil, "", errors.New("dlock: a cluster node's client has no dialer")
			}
			w.mu.Lock()
			if w.tmpl == nil {
				w.tmpl = o
			}
			w.mu.Unlock()
		}
	}
	m, err := w.mux(addr)
	return m, addr, err
}

// masterFor is go-redis's client of the master of key's slot. Until
// go-redis has its slot map, asking may read from a seed node for as long
// as go-redis's own timeouts allow, so it is asked on a goroutine of its
// own, within ctx; once it has one, at once.
func (w *clusterWire) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	if w.loaded.Load() || ctx.Done() == nil {
		n, err := w.cc.MasterForKey(ctx, key)
		if err == nil {
			w.loaded.Store(true)
		}
		return n, err
	}
	type found struct {
		n   *redis.Client
		err error
	}
	ch := make(chan found, 1)
	go func() {
		n, err := w.cc.MasterForKey(context.WithoutCancel(ctx), key)
		ch <- found{n, err}
	}()
	select {
	case f := <-ch:
		if f.err == nil {
			w.loaded.Store(true)
		}
		return f.n, f.err
	case <-ctx.Done():
		return nil, ctx.Err() // nothing was sent to the key's master
	}
}

// mux returns the Mux of the master at addr, made from the masters'
// options (tmpl, which route has set) at the first call.
func (w *clusterWire) mux(addr string) (*wire.Mux, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ms := w.muxes[addr]; ms != nil {
		ms.used = true
		return ms.m, nil // after close too: a closed Mux still sends (wire.Mux.Close)
	}
	if w.closed {
		return nil, wire.ErrClosed
	}
	m := ownMux(w.tmpl, addr)
	w.muxes[addr] = &master{m: m, used: true}
	return m, nil
}

// redirect parses a MOVED or ASK reply ("MOVED 3999 127.0.0.1:6381"):
// ask is true for ASK; ok is false for any other reply.
func redirect(r driver.Reply) (ask bool, slot int, addr string, ok bool) {
	var e *driver.ErrorReply
	if r.Err == nil || !errors.As(r.Err, &e) {
		return false, 0, "", false
	}
	f := strings.Fields(e.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return false, 0, "", false
	}
	s, err := strconv.Atoi(f[1])
	if err != nil {
		return false, 0, "", false
	}
	return f[0] == "ASK", s, f[2], true
}

// redirected is the address a redirect named (to), as go-redis reads
// one: an IPv6 host without brackets gets them, and a loopback host is
// the host of the node that answered (from) when that one is not: a
// cluster that announces loopback addresses, reached from elsewhere.
func redirected(to, from string) string {
	i := strings.LastIndexByte(to, ':')
	if i < 0 {
		return to
	}
	host, port := to[:i], to[i+1:]
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if fromHost, _, err := net.SplitHostPort(from); err == nil && loopback(host) && !loopback(fromHost) {
		host = fromHost
	}
	return net.JoinHostPort(host, port)
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// learn records that slot is served by the master at addr (a MOVED), and
// has go-redis reload its map in the background.
func (w *clusterWire) learn(slot int, addr string) {
	w.mu.Lock()
	w.moved[slot] = movedTo{addr, time.Now().Add(movedFor)}
	w.mu.Unlock()
	w.cc.ReloadState(context.Background())
}

// forget drops what MOVED replies said (Refresh: go-redis's map is
// reloaded, and a redirect will say again where a slot went), and, at
// most every sweepEvery, closes the Muxes that no call used since the
// last time (sweepEvery). A call that took such a Mux just before still
// goes on it (a closed Mux still sends, wire.Mux.Close); the next one
// to that address makes a new Mux.
func (w *clusterWire) forget() {
	var idle []*wire.Mux
	w.mu.Lock()
	clear(w.moved)
	if now := time.Now(); now.Sub(w.swept) >= sweepEvery && !w.closed {
		w.swept = now
		for addr, ms := range w.muxes {
			if !ms.used {
				idle = append(idle, ms.m)
				delete(w.muxes, addr)
			}
			ms.used = false
		}
	}
	w.mu.Unlock()
	for _, m := range idle {
		_ = m.Close()
	}
}

var askingCmd = driver.Command{Args: []any{"ASKING"}}

// do sends c, keyed by key, to its slot's master, following redirects.
func (w *clusterWire) do(ctx context.Context, c driver.Command, key string) driver.Reply {
	if w.gone.Load() {
		return driver.Reply{Err: ErrClientClosed}
	}
	m, addr, err := w.route(ctx, key)
	if err != nil {
		return driver.Reply{Err: err}
	}
	r := m.Do(ctx, c)
	return w.follow(ctx, c, r, addr)
}

// follow follows r, c's reply, while it is a MOVED or an ASK: neither ran
// the command.
func (w *clusterWire) follow(ctx context.Context, c driver.Command, r driver.Reply, from string) driver.Reply {
	for range maxRedirects {
		ask, slot, to, ok := redirect(r)
		if !ok || ctx.Err() != nil {
			return r
		}
		addr := redirected(to, from)
		from = addr
		if !ask {
			w.learn(slot, addr)
		}
		m, err := w.mux(addr)
		if err != nil {
			return driver.Reply{Err: err}
		}
		if !ask {
			r = m.Do(ctx, c)
			continue
		}
		// the command's own reply, whatever ASKING's: it was sent, and
		// ran or was refused on its own account
		r = m.Pipeline(ctx, []driver.Command{askingCmd, c})[1]
	}
	return r
}

// pipeline sends cmds, each to its first key's master, one pipeline a
// master, all at once; a command redirected is followed alone.
func (w *clusterWire) pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	if w.goneNow(ctx) {
		failAll(out, ErrClientClosed)
		return out
	}
	type group struct {
		m    *wire.Mux
		addr string
		idx  []int
	}
	var groups []*group
	// each slot routed once: its commands stay in one group, in order,
	// even when a MOVED changes where the slot goes meanwhile
	bySlot := map[int]*group{}
	for i, c := range cmds {
		key := firstKey(c)
		slot := keyslot.Of(key)
		gr := bySlot[slot]
		if gr == nil {
			m, addr, err := w.route(ctx, key)
			if err != nil {
				out[i] = driver.Reply{Err: err}
				continue
			}
			for _, x := range groups {
				if x.m == m {
					gr = x
				}
			}
			if gr == nil {
				gr = &group{m: m, addr: addr}
				groups = append(groups, gr)
			}
			bySlot[slot] = gr
		}
		gr.idx = append(gr.idx, i)
	}
	send := func(gr *group) {
		part := make([]driver.Command, len(gr.idx))
		for j, i := range gr.idx {
			part[j] = cmds[i]
		}
		rs := gr.m.Pipeline(ctx, part)
		for j, i := range gr.idx {
			out[i] = w.follow(ctx, cmds[i], rs[j], gr.addr)
		}
	}
	if len(groups) == 1 {
		send(groups[0])
		return out
	}
	var wg sync.WaitGroup
	for _, gr := range groups {
		wg.Go(func() { send(gr) })
	}
	wg.Wait()
	return out
}

// dedicated lends a connection of key's master.
func (w *clusterWire) dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	if w.goneNow(ctx) {
		return ErrClientClosed
	}
	m, _, err := w.route(ctx, key)
	if err != nil {
		return err
	}
	return m.Dedicated(ctx, fn)
}

// close closes every master's connections. A call after it goes out
// on a master's Mux as a closed Mux's does (wire.Mux.Close: a given-up
// wait's place, a last release); none dials a master it had not.
func (w *clusterWire) close() error {
	w.mu.Lock()
	w.closed = true
	ms := maps.Clone(w.muxes)
	w.mu.Unlock()
	var err error
	for _, m := range ms {
		err = errors.Join(err, m.m.Close())
	}
	return err
}

// goneNow reports whether cc has been closed, asking the pool of a
// master's go-redis client (closing cc closes them: closedPool) when not
// yet known; found closed, it closes the Muxes. As ownConns, it is asked
// by pipelines and dedicated connections (the watchdog's renewals), not
// by a lone call, which loads gone; and only once go-redis has its slot
// map, from which a master's client comes without I/O.
func (w *clusterWire) goneNow(ctx context.Context) bool {
	if w.gone.Load() {
		return true
	}
	if !w.loaded.Load() {
		return false
	}
	n, err := w.cc.MasterForKey(ctx, "")
	if err != nil || !closedPool(n) {
		return false
	}
	if w.gone.CompareAndSwap(false, true) {
		_ = w.close()
	}
	return true
}
