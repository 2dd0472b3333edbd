package bench

import (
	"net"
	"sync"
	"time"
)

// delayProxy forwards TCP connections to a server, delaying every chunk
// of bytes by d in each direction, as a network with a round trip of 2d
// would. It keeps the order of the bytes and lets a connection carry
// several requests at once (each chunk is delayed, not the connection).
type delayProxy struct {
	ln     net.Listener
	target string
	d      time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startDelayProxy listens on a free loopback port and forwards to target.
func startDelayProxy(target string, d time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, d: d, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients dial instead of the target's.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *delayProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// track registers c to be closed by Close; false if Close has begun.
func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *delayProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *delayProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve forwards one client connection until either side closes it.
func (p *delayProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer p.untrack(client)
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client) })
	wg.Go(func() { p.pipe(client, server) })
	wg.Wait()
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk d after it was read. When either
// side fails it closes both, which ends the opposite pipe too.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if w := time.Until(c.due); w > 0 {
				time.Sleep(w)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close() // stop the reader
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.d)}
		}
		if err != nil { // closed by either side: nothing to report
			break
		}
	}
	close(q)
	<-done
}
