package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup starts a redis-server and a proxy in front of it.
func setup(t *testing.T) (*redistest.Server, *Proxy) {
	t.Helper()
	srv := redistest.StartT(t, redistest.Options{})
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv, p
}

// client returns a go-redis client through p without retries, so that each
// fault is seen by exactly one call.
func client(t *testing.T, p *Proxy, readTimeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:        p.Addr(),
		MaxRetries:  -1,
		PoolSize:    1,
		ReadTimeout: readTimeout,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// raw is a plain TCP connection speaking inline RESP commands.
type raw struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{Conn: c, r: bufio.NewReader(c)}
}

func (c *raw) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
}

// line reads one reply line, waiting at most d.
func (c *raw) line(d time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

func waitConns(t *testing.T, p *Proxy, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for p.Conns() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Conns() = %d, want %d", p.Conns(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPing(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET = %q, %v", v, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d, want 1", n)
	}
	c.Close()
	waitConns(t, p, 0)
}

func TestLargeValue(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	big := strings.Repeat("x", 1<<20)
	if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "big").Result(); err != nil || v != big {
		t.Fatalf("GET big: len %d, %v", len(v), err)
	}
}

func TestLatency(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const d = 50 * time.Millisecond
	p.SetLatency(d) // affects the live connection
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("PING took %v, want >= %v", el, d)
	}
	p.SetLatency(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestLatencyPipelined checks that a delayed chunk does not hold up reading
// later chunks: two replies that arrive gap apart are delivered gap apart,
// not one latency apart.
func TestLatencyPipelined(t *testing.T) {
	_, p := setup(t)
	const lat, gap = 300 * time.Millisecond, 150 * time.Millisecond
	p.SetLatency(lat)
	c := dialRaw(t, p.Addr())
	start := time.Now()
	c.send(t, "PING")
	time.Sleep(gap)
	c.send(t, "ECHO x")
	for _, want := range []string{"+PONG", "$1", "x"} {
		if got, err := c.line(2 * time.Second); err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	el := time.Since(start)
	if el < lat+gap || el >= 2*lat-30*time.Millisecond {
		t.Fatalf("two replies took %v, want about %v", el, lat+gap)
	}
}

func TestDelayNextReply(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, 100*time.Millisecond)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.DelayNextReply(400 * time.Millisecond)
	if err := c.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("delayed PING: %v, want a timeout", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the delayed one: %v", err)
	}
}

func TestResetAll(t *testing.T) {
	_, p := setup(t)

	rc := dialRaw(t, p.Addr())
	rc.send(t, "PING")
	if got, err := rc.line(time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING: %q, %v", got, err)
	}
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitConns(t, p, 2)

	p.ResetAll()
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() after ResetAll = %d", n)
	}
	if _, err := rc.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read on a reset connection: %v, want reset/EOF", err)
	}
	// go-redis either fails this call or notices the dead connection and
	// reconnects; either way the call after it works.
	err := c.Ping(ctx).Err()
	t.Logf("first PING after ResetAll: %v", err)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after reconnect: %v", err)
	}
}

func TestBlackhole(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, 100*time.Millisecond)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, p.Addr())

	p.Blackhole(true)
	if err := c.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("PING through blackhole: %v, want a timeout", err)
	}
	rc.send(t, "ECHO lost")
	if got, err := rc.line(150 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("raw read through blackhole: %q, %v; want a timeout", got, err)
	}

	p.Blackhole(false)
	// The raw connection stayed open; its dropped command left no reply.
	rc.send(t, "ECHO kept")
	for _, want := range []string{"$4", "kept"} {
		if got, err := rc.line(time.Second); err != nil || got != want {
			t.Fatalf("raw read after blackhole: %q, %v; want %q", got, err, want)
		}
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after blackhole: %v", err)
	}
}

func TestSetDown(t *testing.T) {
	_, p := setup(t)
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, p.Addr())
	waitConns(t, p, 2)

	p.SetDown(true)
	if _, err := rc.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read on a connection reset by SetDown: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("PING %d while down succeeded", i)
		}
	}
	// Accepted, then reset at once: the reset may even beat the dial.
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		rc2 := &raw{Conn: c2, r: bufio.NewReader(c2)}
		defer c2.Close()
		if _, err := rc2.line(time.Second); err == nil || isTimeout(err) {
			t.Fatalf("read on a connection made while down: %v", err)
		}
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() while down = %d", n)
	}

	p.SetDown(false)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after SetDown(false): %v", err)
	}
}

func TestUpstreamGone(t *testing.T) {
	srv, p := setup(t)
	c := client(t, p, time.Second)
	ctx := ctxT(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitConns(t, p, 0)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING with upstream killed succeeded")
	}
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after upstream restart: %v", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{})
	opt := goleak.IgnoreCurrent()

	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// Leave connections busy in every state: a reply waiting out a long
	// latency, a blackholed one and an idle one.
	p.SetLatency(time.Hour)
	busy := dialRaw(t, p.Addr())
	busy.send(t, "PING")
	idle := dialRaw(t, p.Addr())
	waitConns(t, p, 2)
	time.Sleep(20 * time.Millisecond) // let the PING reply reach the proxy

	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Close took %v", el)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("proxy still accepts connections after Close")
	}
	busy.Close()
	idle.Close()
	goleak.VerifyNone(t, opt)
}

// A stalled command is not lost: its client gives up and closes, new
// connections go through meanwhile, and deliver runs the command on the
// server afterwards; the orphaned link then ends.
func TestStallDeliversAfterTheClientLeft(t *testing.T) {
	srv, p := setup(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := ctxT(t)

	late := client(t, p, 100*time.Millisecond)
	if err := late.Ping(ctx).Err(); err != nil { // a connection to stall
		t.Fatal(err)
	}
	picks := 0 // only the first connection is stalled
	deliver := p.Stall(func() bool { picks++; return picks == 1 }, nil)
	if err := late.Set(ctx, "k", "late", 0).Err(); !isTimeout(err) {
		t.Fatalf("SET through a stalled connection: %v, want a timeout", err)
	}
	late.Close() // the client gave up and left

	// A connection opened during the stall that pick leaves out goes on.
	fresh := client(t, p, time.Second)
	if err := fresh.Set(ctx, "k", "fresh", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := admin.Get(ctx, "k").Result(); v != "fresh" {
		t.Fatalf("before deliver k = %q, want fresh", v)
	}
	fresh.Close()

	deliver()
	deliver() // a second call changes nothing
	deadline := time.Now().Add(2 * time.Second)
	for {
		v, _ := admin.Get(ctx, "k").Result()
		if v == "late" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deliver k = %q, want the late SET's value", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitConns(t, p, 0)
}

// Held bytes keep their order, and a stalled connection whose client
// stays goes on after deliver with the replies of what was held.
func TestStallKeepsOrder(t *testing.T) {
	_, p := setup(t)
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if s, err := c.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("PING: %q, %v", s, err)
	}
	deliver := p.Stall(func() bool { return true }, nil)
	c.send(t, "SET k 1")
	c.send(t, "APPEND k 2")
	c.send(t, "APPEND k 3")
	if s, err := c.line(100 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a reply while stalled: %q, %v", s, err)
	}
	deliver()
	c.r.Reset(c.Conn)
	for _, want := range []string{"+OK", ":2", ":3"} {
		if s, err := c.line(time.Second); err != nil || s != want {
			t.Fatalf("reply %q, %v; want %q", s, err, want)
		}
	}
	c.send(t, "GET k")
	for _, want := range []string{"$3", "123"} {
		if s, err := c.line(time.Second); err != nil || s != want {
			t.Fatalf("GET: %q, %v; want %q", s, err, want)
		}
	}
}

// Close ends a link that is still stalled, its client gone.
func TestCloseWhileStalled(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{})
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if _, err := c.line(time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall(nil, nil)
	c.send(t, "PING")
	c.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after Close", n)
	}
}

// A connection opened during a stall is stalled too when pick says so.
func TestStallTakesNewConnections(t *testing.T) {
	_, p := setup(t)
	deliver := p.Stall(nil, nil)
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if s, err := c.line(100 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a reply on a connection opened during the stall: %q, %v", s, err)
	}
	deliver()
	c.r.Reset(c.Conn)
	if s, err := c.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("after deliver: %q, %v", s, err)
	}
	// After deliver, new connections are not stalled.
	d := dialRaw(t, p.Addr())
	d.send(t, "PING")
	if s, err := d.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("a connection after deliver: %q, %v", s, err)
	}
}

// ResetAfterForward resets the client's side of a connection after the
// server ran the matched command, before its reply reaches the client;
// commands that do not match, and those after the resets are used up,
// go through.
func TestResetAfterForward(t *testing.T) {
	srv, p := setup(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := ctxT(t)

	disarm := p.ResetAfterForward(1, 0, func(b []byte) bool { return strings.Contains(string(b), "INCR") })
	c := dialRaw(t, p.Addr())
	c.send(t, "PING") // not matched
	if s, err := c.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("PING: %q, %v", s, err)
	}
	c.send(t, "INCR k")
	if s, err := c.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("INCR's reply came: %q, %v; want the connection reset", s, err)
	}
	if v, err := admin.Get(ctx, "k").Int(); err != nil || v != 1 {
		t.Fatalf("k = %d, %v: the server did not run the INCR", v, err)
	}
	// The reset is used up: a second connection's INCR is answered.
	d := dialRaw(t, p.Addr())
	d.send(t, "INCR k")
	if s, err := d.line(time.Second); err != nil || s != ":2" {
		t.Fatalf("INCR after the reset: %q, %v", s, err)
	}
	if n := disarm(); n != 1 {
		t.Fatalf("disarm() = %d resets, want 1", n)
	}
	waitConns(t, p, 1) // the reset link has ended
}

// A client library that retries sends the command again after the reset:
// the server runs it twice, and the client sees the second reply only.
func TestResetAfterForwardResent(t *testing.T) {
	srv, p := setup(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := ctxT(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1}) // MaxRetries: go-redis's default (3)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	disarm := p.ResetAfterForward(1, 0, func(b []byte) bool { return strings.Contains(strings.ToLower(string(b)), "incr") })
	v, err := c.Incr(ctx, "k").Result()
	if n := disarm(); n != 1 {
		t.Fatalf("disarm() = %d resets, want 1", n)
	}
	srvV, _ := admin.Get(ctx, "k").Int()
	t.Logf("go-redis INCR through a reset: %d, %v; the server's k = %d", v, err, srvV)
	if err == nil && (v != 2 || srvV != 2) {
		t.Fatalf("INCR = %d with k = %d, want 2 and 2 (sent twice)", v, srvV)
	}
	if err != nil && srvV != 1 {
		t.Fatalf("INCR failed (%v) with k = %d, want 1 (run once)", err, srvV)
	}
}

// Choke stops reading from the client until its writes block on full
// socket buffers; release lets every byte through, in order.
func TestChokeBlocksWrites(t *testing.T) {
	srv, p := setup(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := ctxT(t)
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if s, err := c.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("PING: %q, %v", s, err)
	}
	release := p.Choke(nil)
	val := strings.Repeat("v", 32<<10)
	cmd := []byte("*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n$32768\r\n" + val + "\r\n")
	sent, blocked := 0, false
	for range (256 << 20) / len(cmd) { // 256 MB at most
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(cmd)
		if err != nil {
			if !isTimeout(err) {
				t.Fatal(err)
			}
			// Finish the command cut by the deadline.
			c.SetWriteDeadline(time.Time{})
			go func() {
				time.Sleep(100 * time.Millisecond)
				release()
			}()
			if _, err := c.Write(cmd[n:]); err != nil {
				t.Fatal(err)
			}
			sent++
			blocked = true
			break
		}
		sent++
	}
	if !blocked {
		t.Fatalf("%d commands written without a write blocking", sent)
	}
	t.Logf("a write blocked after %d commands of %d bytes", sent-1, len(cmd))
	for i := range sent {
		if s, err := c.line(5 * time.Second); err != nil || !strings.HasPrefix(s, ":") {
			t.Fatalf("reply %d: %q, %v", i, s, err)
		}
	}
	if n, err := admin.StrLen(ctx, "k").Result(); err != nil || n != int64(sent*len(val)) {
		t.Fatalf("STRLEN k = %d, %v; want %d", n, err, sent*len(val))
	}
	// A connection opened after release is not choked.
	d := dialRaw(t, p.Addr())
	d.send(t, "PING")
	if s, err := d.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("after release: %q, %v", s, err)
	}
}

// A connection opened during a Choke is choked too; Close ends it.
func TestChokeTakesNewConnections(t *testing.T) {
	_, p := setup(t)
	release := p.Choke(nil)
	defer release()
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if s, err := c.line(100 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("a reply on a connection opened during the choke: %q, %v", s, err)
	}
	release()
	c.r.Reset(c.Conn)
	if s, err := c.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("after release: %q, %v", s, err)
	}
}

// With a hold, the client waits that long on the reply before the reset.
func TestResetAfterForwardHold(t *testing.T) {
	_, p := setup(t)
	const hold = 150 * time.Millisecond
	disarm := p.ResetAfterForward(1, hold, nil)
	c := dialRaw(t, p.Addr())
	t0 := time.Now()
	c.send(t, "PING")
	if s, err := c.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("PING's reply came: %q, %v; want the connection reset", s, err)
	}
	if took := time.Since(t0); took < hold {
		t.Fatalf("reset after %v, want %v or more", took, hold)
	}
	if n := disarm(); n != 1 {
		t.Fatalf("disarm() = %d resets, want 1", n)
	}
}

// RefuseAfterReset: after a reset, new connections are refused for a
// while, then proxied again.
func TestRefuseAfterReset(t *testing.T) {
	_, p := setup(t)
	p.RefuseAfterReset(300 * time.Millisecond)
	disarm := p.ResetAfterForward(1, 0, nil)
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if s, err := c.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("PING's reply came: %q, %v; want the connection reset", s, err)
	}
	disarm()
	// Refused: the dial fails, or the connection is reset at once.
	if nc, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		d := &raw{Conn: nc, r: bufio.NewReader(nc)}
		defer nc.Close()
		_, _ = d.Write([]byte("PING\r\n"))
		if s, err := d.line(time.Second); err == nil || isTimeout(err) {
			t.Fatalf("a connection right after the reset: %q, %v; want it refused", s, err)
		}
	}
	time.Sleep(400 * time.Millisecond)
	e := dialRaw(t, p.Addr())
	e.send(t, "PING")
	if s, err := e.line(time.Second); err != nil || s != "+PONG" {
		t.Fatalf("a connection after the refusal: %q, %v", s, err)
	}
}

// ResetClients resets a stalled connection's client; the server side
// lives on and runs what was held at deliver (WaitHeld saw it held).
func TestResetClientsKeepsStalledServerSide(t *testing.T) {
	srv, p := setup(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := ctxT(t)

	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if _, err := c.line(time.Second); err != nil {
		t.Fatal(err)
	}
	deliver := p.Stall(nil, nil)
	c.send(t, "SET k late")
	if err := p.WaitHeld(ctx); err != nil {
		t.Fatal(err)
	}
	p.ResetClients()
	if s, err := c.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read after ResetClients: %q, %v; want a reset", s, err)
	}
	if n, _ := admin.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("k set before deliver")
	}
	deliver()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if v, _ := admin.Get(ctx, "k").Result(); v == "late" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held SET never ran after deliver")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitConns(t, p, 0)
}

// TestRequestLatency: under SetRequestLatency a command reaches the
// server d after it was sent, not before (a client reaching the server
// directly does not see its write yet), and its reply comes without
// more; commands sent one after another, each in its own chunk, run in
// the order they were sent, and are not delayed cumulatively; a client
// that closes its connection at once after a command does not take it
// back: the command runs, later, as its FIN follows it. Zero removes it.
func TestRequestLatency(t *testing.T) {
	srv, p := setup(t)
	ctx := ctxT(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	const d = 150 * time.Millisecond
	p.SetRequestLatency(d)
	c := dialRaw(t, p.Addr())
	start := time.Now()
	c.send(t, "SET k v")
	time.Sleep(d / 3)
	if v, err := direct.Get(ctx, "k").Result(); err != redis.Nil {
		t.Fatalf("GET k %v after the SET was sent: %q, %v; want nil (the SET on its way)", time.Since(start), v, err)
	}
	if got, err := c.line(2 * time.Second); err != nil || got != "+OK" {
		t.Fatalf("SET: read %q, %v", got, err)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("SET answered after %v, want >= %v", el, d)
	}
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k after the reply: %q, %v", v, err)
	}

	// Order, and no cumulative delay: 20 APPENDs 5 ms apart.
	start = time.Now()
	const n, gap = 20, 5 * time.Millisecond
	for i := range n {
		c.send(t, "APPEND seq "+string(rune('a'+i)))
		time.Sleep(gap)
	}
	for i := range n {
		if _, err := c.line(2 * time.Second); err != nil {
			t.Fatalf("APPEND %d: %v", i, err)
		}
	}
	el := time.Since(start)
	if v, err := direct.Get(ctx, "seq").Result(); err != nil || v != "abcdefghijklmnopqrst" {
		t.Fatalf("seq = %q, %v: the commands ran out of order", v, err)
	}
	if el < d+(n-1)*gap || el > 2*d+n*gap {
		t.Fatalf("%d APPENDs %v apart answered within %v, want about %v", n, gap, el, d+n*gap)
	}

	// A command whose client closes at once still runs, later.
	c2 := dialRaw(t, p.Addr())
	c2.send(t, "SET gone yes")
	c2.Close()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		v, err := direct.Get(ctx, "gone").Result()
		if err == nil && v == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET gone 2 s after its client left: %q, %v", v, err)
		}
	}
	waitConns(t, p, 1)

	p.SetRequestLatency(0)
	start = time.Now()
	c.send(t, "PING")
	if got, err := c.line(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING: %q, %v", got, err)
	}
	if el := time.Since(start); el >= d {
		t.Fatalf("PING took %v with no latency", el)
	}
}
