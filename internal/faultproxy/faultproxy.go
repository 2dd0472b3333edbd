// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, typically a redis-server in tests.
//
// Faults can be changed at any time and affect both live and new
// connections: added latency on replies and on commands, a one-shot delayed reply, a
// blackhole that silently drops traffic, a stall that holds commands on
// their way and delivers them later (after their client gave up), abrupt
// connection resets (at once, or after the server ran a command and
// before its reply reaches the client), a choke that stops reading from
// clients until their writes block on full socket buffers, and a "down"
// mode that refuses service. Close stops every goroutine the proxy
// started before it returns.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	bufSize     = 32 << 10
	queueLen    = 1024 // server→client chunks buffered per connection
	dialTimeout = 5 * time.Second
)

// Proxy forwards connections accepted on a loopback port to an upstream
// address. Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // cancelled by Close; aborts pending dials
	cancel   context.CancelFunc

	latency   atomic.Int64 // time.Duration added to every reply chunk
	reqLat    atomic.Int64 // time.Duration added to every command chunk
	delayNext atomic.Int64 // one-shot time.Duration for the next reply chunk
	blackhole atomic.Bool
	resetArm  atomic.Pointer[resetArm] // the ResetAfterForward in effect, if any
	// refuseAfter: each reset of ResetAfterForward makes the proxy refuse
	// new connections for this long (RefuseAfterReset), until refuseTill
	// (unix ns).
	refuseAfter atomic.Int64
	refuseTill  atomic.Int64

	mu     sync.Mutex
	links  map[*link]struct{}
	stall  *stall // the Stall in effect, if any
	choke  *choke // the Choke in effect, if any
	down   bool
	refuse bool // RefuseNew: new connections are reset, open ones go on
	closed bool
	held   int           // bytes held by stalls so far (WaitHeld)
	onHeld chan struct{} // closed, and replaced, when bytes are held

	wg        sync.WaitGroup // every goroutine started by the proxy
	closeOnce sync.Once
	closeErr  error
}

// New starts a proxy for upstream (host:port) listening on a free
// loopback port.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		links:    make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr returns the address clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every server→client chunk by d, measured from the time
// the chunk arrived from upstream. Order is preserved and chunks are still
// read from upstream while earlier ones wait, so pipelined replies are not
// delayed cumulatively. Zero removes the latency.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetRequestLatency delays every client→server chunk by d, measured from
// the time the chunk was read from the client: the command half of a
// link's latency (SetLatency is the reply half). Chunks are forwarded in
// order, and still read from the client while earlier ones wait, so
// pipelined commands are not delayed cumulatively; a client that closes
// its side does so after its chunks were forwarded, as a FIN follows the
// data. What a chunk meets (Stall, ResetAfterForward, a closed server) is
// what is in effect when it is forwarded; Blackhole, when it is read.
// Zero removes the latency (chunks already waiting still wait theirs).
func (p *Proxy) SetRequestLatency(d time.Duration) { p.reqLat.Store(int64(d)) }

// DelayNextReply delays the next server→client chunk, on whichever
// connection it arrives, by d on top of any latency; later chunks on that
// connection queue behind it. Subsequent chunks are not affected.
func (p *Proxy) DelayNextReply(d time.Duration) { p.delayNext.Store(int64(d)) }

// Blackhole, while on, makes the proxy read and discard all bytes in both
// directions. Connections stay open, so clients see timeouts rather than
// errors.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Stall holds the client→server bytes of the connections for which pick
// returns true (every one when pick is nil), among those open now and
// those opened until deliver: they are kept, not dropped, as a TCP path
// that stalls keeps them. pick may be called from the proxy's goroutines.
// The returned deliver (safe to call more than once) sends each stalled
// connection's held bytes to its server, in order, and resumes
// forwarding; connections are delivered one after another in the order
// of order (their order of stalling when it is nil), as paths that recover
// one by one. A client that closes its connection meanwhile does not take
// the server side with it: the held bytes reach the server anyway, after
// which the proxy half-closes it, reads and discards its replies and
// closes. That is the late command: sent, given up on by its client (who
// may have sent it again on another connection), and run by the server
// afterwards. A second Stall before deliver takes over new connections.
func (p *Proxy) Stall(pick func() bool, order func(n int, swap func(i, j int))) (deliver func()) {
	if pick == nil {
		pick = func() bool { return true }
	}
	s := &stall{pick: pick}
	p.mu.Lock()
	p.stall = s
	for l := range p.links {
		s.take(l)
	}
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		if p.stall == s {
			p.stall = nil
		}
		links := s.links
		s.links = nil
		p.mu.Unlock()
		if order != nil {
			order(len(links), func(i, j int) { links[i], links[j] = links[j], links[i] })
		}
		for _, l := range links {
			l.deliver()
		}
	})
}

// stall is one Stall in effect: its pick and the links it holds.
type stall struct {
	pick  func() bool
	links []*link // guarded by Proxy.mu
}

// take stalls l if pick says so; the caller holds Proxy.mu.
func (s *stall) take(l *link) {
	if !s.pick() {
		return
	}
	l.mu.Lock()
	l.stalled = true
	l.mu.Unlock()
	s.links = append(s.links, l)
}

// ResetAfterForward arms the proxy for n resets (a restarting load
// balancer): each of the next n client→server chunks for which match
// returns true (every chunk when match is nil), on any connection, is
// forwarded to the server, and when the server's next bytes come back on
// that connection the proxy holds them for hold (the client waits on),
// then drops them, resets the client's side (TCP RST) and half-closes
// the server's side (FIN), so that the server runs
// everything it was sent — the command included — and its replies reach
// nobody. The client sees its connection reset with the command's
// outcome unknown; a client library that retries sends it again. A chunk
// is what one read from the client returned: a command, several
// pipelined ones, or part of a large one. match may be called from the
// proxy's goroutines, concurrently. disarm (safe to call more than once)
// takes back the resets not used yet (a chunk already forwarded still
// resets its connection at its reply) and returns how many connections
// were reset so far. A new ResetAfterForward replaces the one in effect.
func (p *Proxy) ResetAfterForward(n int, hold time.Duration, match func([]byte) bool) (disarm func() (resets int)) {
	a := &resetArm{match: match, hold: hold}
	a.left.Store(int64(n))
	p.resetArm.Store(a)
	return func() int {
		p.resetArm.CompareAndSwap(a, nil)
		return int(a.done.Load())
	}
}

// RefuseAfterReset makes each reset of ResetAfterForward (from now on)
// followed by d during which the proxy resets new connections at once, as
// a load balancer that is restarting refuses them: a client that sends
// its call again finds no way to the server for a while. Zero turns it
// off.
func (p *Proxy) RefuseAfterReset(d time.Duration) { p.refuseAfter.Store(int64(d)) }

// resetArm is one ResetAfterForward: the resets left, and those made.
type resetArm struct {
	match func([]byte) bool
	hold  time.Duration
	left  atomic.Int64
	done  atomic.Int64
}

// take reports whether chunk b, about to be forwarded, uses a reset.
func (a *resetArm) take(b []byte) bool {
	if a.left.Load() <= 0 || a.match != nil && !a.match(b) {
		return false
	}
	return a.left.Add(-1) >= 0
}

// Choke stops reading the client→server bytes of the connections for
// which pick returns true (every one when pick is nil), among those open
// now and those opened until release: nothing is read, so the kernel's
// buffers fill — the proxy's receive buffer, then the client's send
// buffer — and the client's writes block, as behind a path or a server
// that stopped reading. Replies already on their way still reach the
// client. release (safe to call more than once) makes the proxy read
// and forward again. pick may be called from the proxy's goroutines. A
// second Choke before release takes over new connections.
func (p *Proxy) Choke(pick func() bool) (release func()) {
	if pick == nil {
		pick = func() bool { return true }
	}
	c := &choke{pick: pick, ch: make(chan struct{})}
	p.mu.Lock()
	p.choke = c
	for l := range p.links {
		c.take(l)
	}
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		if p.choke == c {
			p.choke = nil
		}
		p.mu.Unlock()
		close(c.ch)
	})
}

// choke is one Choke in effect.
type choke struct {
	pick func() bool
	ch   chan struct{} // closed by release
}

// take chokes l if pick says so; the caller holds Proxy.mu.
func (c *choke) take(l *link) {
	if !c.pick() {
		return
	}
	l.mu.Lock()
	l.choked = c.ch
	l.mu.Unlock()
}

// ResetAll abruptly closes all current connections (with a TCP RST) on both
// the client and the upstream side.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// ResetClients abruptly closes the client side of every connection (a
// TCP RST). The server side of a stalled one lives on: its held bytes
// reach the server at deliver (see Stall), the client gone; the others
// close.
func (p *Proxy) ResetClients() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		abort(l.client) // its reader then leaves (leave): stalled, the link lives on
	}
}

// WaitHeld returns once a stall has held some client→server bytes since
// the proxy started, or with ctx's error.
func (p *Proxy) WaitHeld(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.held > 0 {
			p.mu.Unlock()
			return nil
		}
		if p.onHeld == nil {
			p.onHeld = make(chan struct{})
		}
		ch := p.onHeld
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// noteHeld counts n bytes held by a stall and wakes WaitHeld.
func (p *Proxy) noteHeld(n int) {
	p.mu.Lock()
	p.held += n
	if p.onHeld != nil {
		close(p.onHeld)
		p.onHeld = nil
	}
	p.mu.Unlock()
}

// SetDown, when on, resets all current connections and makes the proxy
// accept and immediately reset new ones, as if the server were gone. When
// off, new connections are proxied again.
func (p *Proxy) SetDown(on bool) {
	p.mu.Lock()
	p.down = on
	p.mu.Unlock()
	if on {
		p.ResetAll()
	}
}

// RefuseNew, when on, resets new connections at once while those open
// go on (stalled ones stay stalled): a partition that a TCP connection
// already established rides out, its bytes retransmitted later, while a
// new connection's handshake fails. When off, new connections are
// proxied again.
func (p *Proxy) RefuseNew(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Conns returns the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops the listener, resets all connections and waits until every
// goroutine of the proxy has exited. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.ln.Close()
		p.ResetAll()
		p.wg.Wait()
	})
	return p.closeErr
}

// serve accepts client connections until the listener is closed.
func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient failure such as running out of descriptors.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.down || p.closed || p.refuse || time.Now().UnixNano() < p.refuseTill.Load()
		if !refuse {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			abort(c)
			continue
		}
		go p.handle(c)
	}
}

// handle dials upstream for a new client connection and starts pumping.
func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		abort(client)
		return
	}
	l := &link{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		abort(client)
		abort(server)
		return
	}
	p.links[l] = struct{}{}
	if p.stall != nil {
		p.stall.take(l)
	}
	if p.choke != nil {
		p.choke.take(l)
	}
	p.wg.Add(4)
	p.mu.Unlock()

	q := make(chan chunk, queueLen)
	cq := make(chan chunk, queueLen)
	wrote := make(chan struct{})
	go l.clientToServer(cq, wrote)
	go l.writeServer(cq, wrote)
	go l.readServer(q)
	go l.writeClient(q)
}

// link is one proxied connection: a client connection and its upstream.
type link struct {
	p      *Proxy
	client net.Conn
	server net.Conn
	done   chan struct{} // closed by close
	once   sync.Once

	mu      sync.Mutex // orders client→server writes with deliver
	stalled bool       // client→server bytes are held
	held    [][]byte   // what was held, in order
	orphan  bool       // the client left while stalled: deliver, then close
	// resetBy: a chunk was forwarded under this ResetAfterForward; the
	// server's next bytes reset the client (resetClient).
	resetBy *resetArm
	// draining: the client was reset, the server's side half-closed; the
	// link ends when the server has closed its side.
	draining bool
	choked   chan struct{} // while open: client→server bytes are not read (Choke)
	// waiting counts the client→server chunks queued for writeServer
	// (SetRequestLatency): while any is, later ones queue behind it.
	waiting atomic.Int64
}

// forward sends b to the server, or holds it while the link is stalled.
func (l *link) forward(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled {
		l.held = append(l.held, bytes.Clone(b))
		l.p.noteHeld(len(b))
		return nil
	}
	if l.resetBy == nil && !l.draining {
		// Armed before the write, under mu: readServer, which takes mu
		// to reset, cannot see the flag before b was sent.
		if a := l.p.resetArm.Load(); a != nil && a.take(b) {
			l.resetBy = a
		}
	}
	_, err := l.server.Write(b)
	return err
}

// resetClient, once bytes came from the server: if a chunk forwarded
// under ResetAfterForward awaits its reply, the client's side is reset
// (RST), after the arm's hold, and the server's half-closed (FIN: it runs
// what it was sent), and the link drains. It reports whether the link is
// draining (or closed meanwhile).
func (l *link) resetClient() bool {
	l.mu.Lock()
	if l.draining {
		l.mu.Unlock()
		return true
	}
	a := l.resetBy
	if a == nil {
		l.mu.Unlock()
		return false
	}
	l.resetBy, l.draining = nil, true
	l.mu.Unlock()
	if a.hold > 0 {
		t := time.NewTimer(a.hold)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			return true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a.done.Add(1)
	if d := l.p.refuseAfter.Load(); d > 0 {
		l.p.refuseTill.Store(time.Now().Add(time.Duration(d)).UnixNano())
	}
	abort(l.client)
	if tc, ok := l.server.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		l.server.Close()
	}
	return true
}

// chokedCh returns the channel that ends the Choke of l, if any.
func (l *link) chokedCh() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.choked
}

// deliver ends a stall: the held bytes go to the server in order. An
// orphaned link's server side is then half-closed; the server runs what it
// was sent, closes, and the link ends with it.
func (l *link) deliver() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stalled = false
	for _, b := range l.held {
		if _, err := l.server.Write(b); err != nil {
			break
		}
	}
	l.held = nil
	if l.orphan {
		if tc, ok := l.server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			l.server.Close()
		}
	}
}

// leave handles the client's side ending: the link closes, unless it is
// stalled, in which case it lives on until deliver.
func (l *link) leave() {
	l.mu.Lock()
	if l.stalled {
		l.orphan = true
		l.mu.Unlock()
		return
	}
	if l.draining {
		l.mu.Unlock()
		return // it ends when the server closes (readServer)
	}
	l.mu.Unlock()
	l.close(false)
}

// chunk is a piece of server→client data with the time it arrived.
type chunk struct {
	data    []byte
	arrived time.Time
	extra   time.Duration // one-shot delay taken by this chunk
}

// close shuts both sides of the link down, with a TCP RST if abortive, and
// forgets it. It is safe to call more than once and from any goroutine.
func (l *link) close(abortive bool) {
	l.once.Do(func() {
		if abortive {
			abort(l.client)
			abort(l.server)
		} else {
			l.client.Close()
			l.server.Close()
		}
		close(l.done)
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

// clientToServer copies client→server bytes, dropping them while the
// proxy is blackholed. Under SetRequestLatency (or while chunks queued
// under it still wait) it queues them on cq for writeServer; when the
// client's side ends it closes cq and leaves once writeServer has
// forwarded what was queued (wrote).
func (l *link) clientToServer(cq chan<- chunk, wrote <-chan struct{}) {
	defer l.p.wg.Done()
	defer close(cq) // writeServer ends once it forwarded what is queued
	buf := make([]byte, bufSize)
	for {
		if ch := l.chokedCh(); ch != nil {
			select {
			case <-ch:
			case <-l.done:
				return
			}
		}
		n, err := l.client.Read(buf)
		if n > 0 && !l.p.blackhole.Load() {
			if d := time.Duration(l.p.reqLat.Load()); d > 0 || l.waiting.Load() > 0 {
				l.waiting.Add(1)
				select {
				case cq <- chunk{data: bytes.Clone(buf[:n]), arrived: time.Now(), extra: d}:
				case <-l.done:
					return
				}
			} else if werr := l.forward(buf[:n]); werr != nil {
				l.close(true)
				return
			}
		}
		if err != nil {
			if l.waiting.Load() > 0 {
				// The client's FIN follows its data: leave once the
				// chunks queued are forwarded.
				l.p.wg.Add(1)
				go func() {
					defer l.p.wg.Done()
					select {
					case <-wrote:
						l.leave()
					case <-l.done:
					}
				}()
				return
			}
			l.leave()
			return
		}
	}
}

// writeServer forwards the client→server chunks that clientToServer
// queued (SetRequestLatency), each once its latency (extra, taken when it
// was read) has passed since it was read, in order. It closes wrote
// when cq ends and everything on it was forwarded.
func (l *link) writeServer(cq <-chan chunk, wrote chan<- struct{}) {
	defer l.p.wg.Done()
	defer close(wrote)
	for c := range cq {
		if !l.waitUntil(c.arrived.Add(c.extra)) {
			return
		}
		err := l.forward(c.data)
		l.waiting.Add(-1)
		if err != nil {
			l.close(true)
			return
		}
	}
}

// readServer reads server→client chunks, stamps them and queues them for
// writeClient. Chunks read while blackholed are dropped. It closes q when
// upstream is done so that writeClient can deliver what is queued.
func (l *link) readServer(q chan<- chunk) {
	defer l.p.wg.Done()
	defer close(q)
	buf := make([]byte, bufSize)
	for {
		n, err := l.server.Read(buf)
		if n > 0 && !l.p.blackhole.Load() && !l.resetClient() {
			c := chunk{
				data:    bytes.Clone(buf[:n]),
				arrived: time.Now(),
				extra:   time.Duration(l.p.delayNext.Swap(0)),
			}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitUntil waits until due; false if the link ended first.
func (l *link) waitUntil(due time.Time) bool {
	wait := time.Until(due)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// writeClient delivers queued chunks to the client once their delay has
// passed, then closes the link when the queue ends. Once the client cannot
// be written to, it discards the rest: an orphaned link's server is still
// answering the commands delivered late.
func (l *link) writeClient(q <-chan chunk) {
	defer l.p.wg.Done()
	defer l.close(false)
	for c := range q {
		if !l.waitUntil(c.arrived.Add(time.Duration(l.p.latency.Load()) + c.extra)) {
			return
		}
		if _, err := l.client.Write(c.data); err != nil {
			for range q {
			}
			return
		}
	}
}

// abort closes c with a TCP RST instead of an orderly FIN where possible.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
