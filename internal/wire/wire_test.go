package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.Ignored()...) }

// counting is a Dial that counts the connections made and the writes on
// them.
type counting struct {
	addr          string
	dials, writes atomic.Int64
}

func (c *counting) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	c.dials.Add(1)
	return countingConn{nc, c}, nil
}

type countingConn struct {
	net.Conn
	c *counting
}

// SyscallConn lets the idle check reach the socket.
func (w countingConn) SyscallConn() (syscall.RawConn, error) {
	return w.Conn.(syscall.Conn).SyscallConn()
}

func (w countingConn) Write(p []byte) (int, error) {
	w.c.writes.Add(1)
	return w.Conn.Write(p)
}

func newMux(t *testing.T, s *redistest.Server, cfg Config) (*Mux, *counting) {
	cn := &counting{addr: s.Addr()}
	cfg.Dial = cn.dial
	m := New(cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m, cn
}

func cmd(args ...any) driver.Command { return driver.Command{Args: args} }

// Calls made at once go out together: fewer writes than calls, on one
// connection, and every caller gets its own reply.
func TestCallsShareWrites(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{})
	const workers, each = 32, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				v := fmt.Sprintf("%d-%d", w, i)
				if r := m.Do(context.Background(), cmd("ECHO", v)); r.Err != nil || r.Val != v {
					t.Errorf("ECHO %s = %+v", v, r)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := cn.dials.Load(); n != 1 {
		t.Errorf("%d connections dialled, want 1", n)
	}
	if n := cn.writes.Load(); n >= workers*each {
		t.Errorf("%d writes for %d calls: none shared", n, workers*each)
	}
	t.Logf("%d writes for %d calls", cn.writes.Load(), workers*each)
}

// callToPausedServer makes a Mux with cfg on a server it then pauses,
// and sends it ECHO late with a ctx that cancel ends: got receives its
// reply, once the call is on the wire.
func callToPausedServer(t *testing.T, cfg Config) (s *redistest.Server, m *Mux, got chan driver.Reply, cancel context.CancelFunc) {
	s = redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, cfg)
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got = make(chan driver.Reply)
	written := cn.writes.Load()
	go func() { got <- m.Do(ctx, cmd("ECHO", "late")) }()
	for cn.writes.Load() == written { // the call is on the wire
		runtime.Gosched()
	}
	return s, m, got, cancel
}

// A call to a paused server returns when its ctx ends, with an
// *errs.Late that matches ctx's error; its Done closes once the reply
// has come (to nobody), and the next call gets its own reply, not the
// late one.
func TestCallReturnsAtCtxEnd(t *testing.T) {
	s, m, got, cancel := callToPausedServer(t, Config{ReadTimeout: time.Minute})
	cancel()
	r := <-got
	late, ok := errors.AsType[*errs.Late](r.Err)
	if !ok || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("Do on a paused server = %+v, want an *errs.Late of context.Canceled", r)
	}
	select {
	case <-late.Done:
		t.Fatal("Done closed while the server is paused")
	default:
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-late.Done
	if r := m.Do(context.Background(), cmd("ECHO", "next")); r.Val != "next" {
		t.Fatalf("the call after a late one = %+v, want its own reply", r)
	}
}

// A server that does not answer within ReadTimeout ends the connection:
// the call in flight fails with a round-trip error (not an ErrorReply),
// its Done closes, and the next call dials anew once the server answers.
func TestReadTimeoutEndsTheConnection(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{ReadTimeout: 200 * time.Millisecond})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	r := m.Do(context.Background(), cmd("PING"))
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, isReply := errors.AsType[*driver.ErrorReply](r.Err); r.Err == nil || isReply || !errors.Is(r.Err, os.ErrDeadlineExceeded) {
		t.Fatalf("PING to a paused server = %+v, want a read timeout", r)
	}
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING after the timeout = %+v", r)
	}
	if n := cn.dials.Load(); n != 2 {
		t.Errorf("%d connections dialled, want 2", n)
	}
}

// A connection the server closed while it was idle is checked before a
// call goes on it: the call goes on a new connection and succeeds.
func TestIdleConnectionClosedByTheServer(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	defer func(d time.Duration) { idleCheck = d }(idleCheck)
	idleCheck = 0
	m, cn := newMux(t, s, Config{Hello: func(context.Context) ([]driver.Command, error) {
		return []driver.Command{cmd("CLIENT", "SETNAME", "wiretest")}, nil
	}})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	admin := s.Client()
	defer admin.Close()
	if n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL = %d, %v", n, err)
	}
	// the kill is done when the server lists no such client
	for {
		list, err := admin.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(list, "name=wiretest") {
			break
		}
	}
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING after the server closed the idle connection = %+v", r)
	}
	if n := cn.dials.Load(); n != 2 {
		t.Errorf("%d connections dialled, want 2", n)
	}
}

// The hello commands run on every new connection; an error reply to one
// fails the call, wrapped, and the call after it dials again.
func TestHello(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	db := atomic.Int64{}
	db.Store(99) // no such database
	m, _ := newMux(t, s, Config{Hello: func(context.Context) ([]driver.Command, error) {
		return []driver.Command{cmd("SELECT", db.Load())}, nil
	}})
	r := m.Do(context.Background(), cmd("PING"))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "SELECT") {
		t.Fatalf("PING with a failing hello = %+v, want the SELECT's error", r)
	}
	db.Store(3)
	m.Do(context.Background(), cmd("SET", "k", "v"))
	admin := s.Client()
	defer admin.Close()
	if v, err := admin.Do(context.Background(), "SELECT", 3).Result(); err != nil || v != "OK" {
		t.Fatal(v, err)
	}
	if r := m.Do(context.Background(), cmd("CLIENT", "INFO")); r.Err != nil || !strings.Contains(fmt.Sprint(r.Val), "db=3") {
		t.Fatalf("CLIENT INFO = %+v, want db=3", r)
	}
}

// A killed server fails the calls in flight and later ones with a
// round-trip error.
func TestKilledAndClosed(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	for i, r := range m.Pipeline(context.Background(), []driver.Command{cmd("PING"), cmd("PING")}) {
		if _, isReply := errors.AsType[*driver.ErrorReply](r.Err); r.Err == nil || isReply {
			t.Errorf("reply %d from a killed server = %+v", i, r)
		}
	}
	_ = m.Close()
}

// Close closes an idle connection at once, and one with a call in flight
// once its reply has come; a call made after Close still goes, on a
// connection that closes once idle. (TestMain's goleak sees the reader
// goroutines end.)
func TestCloseWhenIdle(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	admin := s.Client()
	defer admin.Close()
	clients := func() int {
		list, err := admin.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "\n")
	}
	before := clients()
	_ = m.Close()
	for clients() != before-1 { // the server sees the idle connection go
	}
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING after Close = %+v, want it sent on a new connection", r)
	}
	for clients() != before-1 { // and that one go once idle
	}
	if n := cn.dials.Load(); n != 2 {
		t.Errorf("%d connections dialled, want 2", n)
	}
}

// A word of a type RESP cannot carry is an error of that call alone.
func TestBadWord(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("ECHO", 1.5)); r.Err == nil {
		t.Errorf("ECHO 1.5 = %+v, want an error", r)
	}
	if r := m.Do(context.Background(), cmd("ECHO", "x")); r.Val != "x" {
		t.Errorf("ECHO x after a bad word = %+v", r)
	}
}

// Dedicated lends a connection of its own: a WATCH there is not seen by
// the shared one, and a transaction's replies come back in order.
func TestDedicated(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{})
	for range 3 {
		err := m.Dedicated(context.Background(), func(c driver.Conn) error {
			rs := c.Pipeline(context.Background(), []driver.Command{cmd("WATCH", "k"), cmd("MULTI"), cmd("INCR", "k"), cmd("EXEC")})
			if rs[3].Err != nil {
				return rs[3].Err
			}
			if _, ok := rs[3].Val.([]any); !ok {
				return fmt.Errorf("EXEC = %+v", rs[3])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := cn.dials.Load(); n != 1 {
		t.Errorf("%d connections dialled for 3 Dedicated in turn, want 1 (kept idle)", n)
	}
}

// A call on a connection the server closed (a restart) is sent again on
// a new one, as MaxRetries allows; with none allowed, it fails.
func TestRestartedServerIsRetried(t *testing.T) {
	for _, retries := range []int{0, 3} {
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			s := redistest.StartT(t, redistest.Options{})
			m, cn := newMux(t, s, Config{MaxRetries: retries})
			if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
				t.Fatalf("PING = %+v", r)
			}
			if err := s.Restart(false); err != nil {
				t.Fatal(err)
			}
			r := m.Do(context.Background(), cmd("PING"))
			switch {
			case retries > 0 && r.Val != "PONG":
				t.Fatalf("PING after a restart = %+v, want it sent again", r)
			case retries == 0 && r.Err == nil:
				t.Fatalf("PING after a restart with no retries = %+v, want the failed connection's error", r)
			}
			if n := cn.dials.Load(); retries > 0 && n != 2 {
				t.Errorf("%d connections dialled, want 2", n)
			}
		})
	}
}

// A connection whose server answers READONLY (a failover made it a
// replica) takes no more calls: the next call dials anew (a failover
// client's Dialer then finds the new master).
func TestReadOnlyRetiresTheConnection(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	master := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("SET", "k", "v")); r.Err != nil {
		t.Fatalf("SET = %+v", r)
	}
	if r := m.Do(context.Background(), cmd("REPLICAOF", "127.0.0.1", master.Port())); r.Err != nil {
		t.Fatalf("REPLICAOF = %+v", r)
	}
	if r := m.Do(context.Background(), cmd("SET", "k", "v")); r.Err == nil || !strings.HasPrefix(r.Err.Error(), "READONLY") {
		t.Fatalf("SET on a replica = %+v, want READONLY", r)
	}
	if r := m.Do(context.Background(), cmd("REPLICAOF", "NO", "ONE")); r.Err != nil {
		t.Fatalf("REPLICAOF NO ONE = %+v", r)
	}
	if n := cn.dials.Load(); n != 2 {
		t.Errorf("%d connections dialled, want 2: the one that met READONLY is retired", n)
	}
	if r := m.Do(context.Background(), cmd("SET", "k", "v")); r.Err != nil {
		t.Fatalf("SET on the master again = %+v", r)
	}
}

// A Mux used inside a testing/synctest bubble leaves nothing of the
// bubble behind for a Mux used outside it (a pool of calls shared by
// every Mux would hand out a channel made in the bubble: a fatal error).
func TestSynctestBubbleStaysInside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(Config{Dial: func(context.Context) (net.Conn, error) {
			client, server := net.Pipe()
			go func() { // a server that answers every command +PONG
				defer server.Close()
				r := bufio.NewReader(server)
				for {
					if _, err := readReply(r); err != nil {
						return
					}
					if _, err := server.Write([]byte("+PONG\r\n")); err != nil {
						return
					}
				}
			}()
			return client, nil
		}})
		for range 3 {
			if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
				t.Fatalf("PING in the bubble = %+v", r)
			}
		}
		_ = m.Close()
	})
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{})
	for range 3 {
		if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
			t.Fatalf("PING outside = %+v", r)
		}
	}
}

// A pipeline of bulkMin commands or more (the watchdog's renewals) goes
// on a connection of its own, so that calls do not wait behind it; each
// command gets its own reply.
func TestBulkPipelineHasItsOwnConnection(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	small := m.Pipeline(context.Background(), []driver.Command{cmd("ECHO", "a"), cmd("ECHO", "b")})
	if small[0].Val != "a" || small[1].Val != "b" {
		t.Fatalf("a small pipeline = %+v", small)
	}
	if n := cn.dials.Load(); n != 1 {
		t.Fatalf("%d connections after a call and a small pipeline, want 1", n)
	}
	cmds := make([]driver.Command, bulkMin)
	for i := range cmds {
		cmds[i] = cmd("ECHO", fmt.Sprint(i))
	}
	for i, r := range m.Pipeline(context.Background(), cmds) {
		if r.Val != fmt.Sprint(i) {
			t.Fatalf("reply %d of a bulk pipeline = %+v", i, r)
		}
	}
	if n := cn.dials.Load(); n != 2 {
		t.Errorf("%d connections after a bulk pipeline, want 2", n)
	}
	// Few commands of many keys (renewals folded into scripts of 100
	// holds each, internal/backend) are bulk too: on the calls' lane a
	// Lock would wait behind them. (A third connection would mean they
	// went there while the bulk one was busy; none is.)
	m2, cn2 := newMux(t, s, Config{})
	if r := m2.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	keys := []any{"EXISTS"}
	for i := range bulkMin {
		keys = append(keys, fmt.Sprint("k", i))
	}
	many := driver.Command{Args: keys, FirstKey: 1, Keys: bulkMin}
	for _, r := range m2.Pipeline(context.Background(), []driver.Command{many, many}) {
		if r.Val != int64(0) {
			t.Fatalf("EXISTS of %d keys = %+v", bulkMin, r)
		}
	}
	if n := cn2.dials.Load(); n != 2 {
		t.Errorf("%d connections after a pipeline of two commands of %d keys each, want 2", n, bulkMin)
	}
}

// A lone call is written and read on its caller's goroutine: calls made
// one after another start no reader goroutine, and neither do many
// callers at once while none gives up (each reads its own reply, or
// hands the reading to the next caller waiting).
func TestCallersReadTheirOwnReplies(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 100 {
		v := fmt.Sprint(i)
		if r := m.Do(ctx, cmd("ECHO", v)); r.Val != v {
			t.Fatalf("ECHO %s = %+v", v, r)
		}
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 50 {
				v := fmt.Sprintf("%d-%d", w, i)
				if r := m.Do(ctx, cmd("ECHO", v)); r.Val != v {
					t.Errorf("ECHO %s = %+v", v, r)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := m.readers.Load(); n != 0 {
		t.Errorf("%d reader goroutines started for calls that all waited for their replies, want 0", n)
	}
}

// A call alone on its connection is read by a goroutine while another
// connection of the process awaits a reply (see "Who reads"), and by its
// caller when none does; and the count of busy connections comes back
// to 0 once every reply is in, whichever read it.
func TestReaderWhenOtherConnectionsWait(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	a, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	b, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n := busyConns.Load(); n != 0 {
		t.Fatalf("%d connections busy before the test", n)
	}
	blocked := make(chan driver.Reply, 1)
	go func() { blocked <- a.Do(ctx, cmd("BLPOP", "k", 30)) }()
	waitBusy(t, ctx, 1) // until a's BLPOP awaits its reply
	if r := b.Do(ctx, cmd("ECHO", "x")); r.Val != "x" {
		t.Fatalf("ECHO = %+v", r)
	}
	if n := b.readers.Load(); n != 1 {
		t.Errorf("a call alone on its connection while another waits: %d reader goroutines, want 1", n)
	}
	if r := b.Do(ctx, cmd("RPUSH", "k", "v")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := <-blocked; r.Err != nil {
		t.Fatalf("BLPOP = %+v", r)
	}
	waitBusy(t, ctx, 0) // b's reader has delivered RPUSH's reply
	before := b.readers.Load()
	if r := b.Do(ctx, cmd("ECHO", "y")); r.Val != "y" {
		t.Fatalf("ECHO = %+v", r)
	}
	if n := b.readers.Load() - before; n != 0 {
		t.Errorf("a call alone in the process: %d reader goroutines, want 0 (its caller reads)", n)
	}
}

// A lone call that a reader goroutine reads (another connection waits)
// still returns at its ctx's end when the server stalls: an *errs.Late
// of the ctx's error, whose Done closes once the reply has come.
func TestReaderReadCallBoundedByCtx(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	a, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	b, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	bg, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r := b.Do(bg, cmd("PING")); r.Err != nil { // b's connection dialled
		t.Fatal(r.Err)
	}
	blocked := make(chan driver.Reply, 1)
	go func() { blocked <- a.Do(bg, cmd("BLPOP", "k", 30)) }()
	waitBusy(t, bg, 1)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	before := b.readers.Load()
	ctx, cancelCall := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancelCall()
	start := time.Now()
	r := b.Do(ctx, cmd("RPUSH", "k", "v"))
	took := time.Since(start)
	late, ok := errors.AsType[*errs.Late](r.Err)
	if !ok || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("Do on a paused server = %+v, want an *errs.Late of context.DeadlineExceeded", r)
	}
	if took > 5*time.Second {
		t.Errorf("Do returned after %v, its ctx ended after 100ms", took)
	}
	if n := b.readers.Load() - before; n != 1 {
		t.Errorf("%d reader goroutines for the call, want 1 (the path under test)", n)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.Done: // the RPUSH ran after all, and its reply came
	case <-bg.Done():
		t.Fatal("the given-up call's Done did not close after the server resumed")
	}
	if r := <-blocked; r.Err != nil {
		t.Fatalf("BLPOP = %+v", r)
	}
}

// A reply a reader has read whole as the connection fails (fail, from a
// write that met a killed connection, runs between the reader's read and
// its add) is dropped: its call has the connection's error already, and
// the queue fail emptied is left as it is (torture seed 374616220: a
// panic, index out of range, in add).
func TestReplyReadAsTheConnectionFails(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := &conn{m: New(Config{}), nc: client, mu: make(ctxMutex, 1)}
	k := newCall(make([]driver.Reply, 1))
	c.mu.Lock()
	c.queue = append(c.queue, k)
	busyConns.Add(1) // as roundTrip counts it
	c.reading = true
	h := c.queue[c.head] // the reader's read starts
	c.mu.Unlock()
	c.fail(errors.New("write: broken pipe")) // a writer meets the killed connection
	c.mu.Lock()
	c.add(h, driver.Reply{Val: "OK"}) // the reply the reader had read
	c.mu.Unlock()
	if !errors.Is(k.many[0].Err, k.failed) || k.failed == nil {
		t.Fatalf("the call's reply = %+v (failed %v), want the connection's error", k.many[0], k.failed)
	}
	if n := busyConns.Load(); n != 0 {
		t.Fatalf("%d connections counted busy after the failure, want 0", n)
	}
}

// waitBusy waits until n connections await replies, or fails at ctx's end.
func waitBusy(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	for busyConns.Load() != n {
		if ctx.Err() != nil {
			t.Fatalf("%d connections busy, want %d", busyConns.Load(), n)
		}
		runtime.Gosched()
	}
}

// A reading caller whose ctx deadline passes while the server is paused
// returns an *errs.Late at its deadline; the calls queued behind it get
// their own replies (a goroutine reads on), and its Done closes once its
// reply has come.
func TestReadingCallerDeadline(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, cn := newMux(t, s, Config{ReadTimeout: time.Minute})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r := m.Do(ctx, cmd("ECHO", "first"))
	late, ok := errors.AsType[*errs.Late](r.Err)
	if !ok || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("Do on a paused server = %+v, want an *errs.Late of context.DeadlineExceeded", r)
	}
	behind := make(chan driver.Reply, 3)
	written := cn.writes.Load()
	for i := range 3 {
		go func() { behind <- m.Do(context.Background(), cmd("ECHO", fmt.Sprint(i))) }()
	}
	for cn.writes.Load() == written {
		runtime.Gosched()
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-late.Done
	seen := map[any]bool{}
	for range 3 {
		r := <-behind
		if r.Err != nil {
			t.Fatalf("a call behind the late one = %+v", r)
		}
		seen[r.Val] = true
	}
	if len(seen) != 3 || seen["first"] {
		t.Fatalf("the calls behind the late one got %v, want 0, 1 and 2", seen)
	}
	if n := cn.dials.Load(); n != 1 {
		t.Errorf("%d connections dialled, want 1: a caller's deadline does not end the connection", n)
	}
}

// A reply that arrives in pieces, with the reading caller's ctx ending
// between them, is read whole by the goroutine that reads on: nothing is
// half read, the late call's Done closes with the rest, and the next
// call gets its own reply.
func TestCallerGivesUpInsideAReply(t *testing.T) {
	client, server := net.Pipe()
	m := New(Config{Dial: func(context.Context) (net.Conn, error) { return client, nil }})
	defer m.Close()
	r := bufio.NewReader(server)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan driver.Reply, 1)
	go func() { got <- m.Do(ctx, cmd("ECHO", "split")) }()
	if _, err := readReply(r); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("$5\r\nsp")); err != nil { // the first piece
		t.Fatal(err)
	}
	cancel()
	rep := <-got
	late, ok := errors.AsType[*errs.Late](rep.Err)
	if !ok {
		t.Fatalf("Do cancelled inside its reply = %+v, want an *errs.Late", rep)
	}
	next := make(chan driver.Reply, 1)
	go func() { next <- m.Do(context.Background(), cmd("ECHO", "next")) }()
	if _, err := server.Write([]byte("lit\r\n")); err != nil { // the rest
		t.Fatal(err)
	}
	<-late.Done
	if _, err := readReply(r); err != nil { // the next call
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("$4\r\nnext\r\n")); err != nil {
		t.Fatal(err)
	}
	if rep := <-next; rep.Val != "next" {
		t.Fatalf("the call after the split reply = %+v, want its own", rep)
	}
	_ = server.Close()
}

// A reply larger than the read buffer, which a caller cannot hold whole,
// is read by a goroutine and reaches its caller intact.
func TestReplyLargerThanTheBuffer(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{})
	big := strings.Repeat("x", 100<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if r := m.Do(ctx, cmd("ECHO", big)); r.Val != big {
			t.Fatalf("ECHO of %d bytes = %d bytes, %v", len(big), len(fmt.Sprint(r.Val)), r.Err)
		}
	}
	if r := m.Do(ctx, cmd("ECHO", "small")); r.Val != "small" {
		t.Fatalf("ECHO after a large one = %+v", r)
	}
	if n := m.readers.Load(); n < 1 || n > 2 { // 1 when the second call came before the first's reader ended
		t.Errorf("%d reader goroutines for 2 large replies, want 1 or 2", n)
	}
}

func TestScanReply(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		full bool
	}{
		{"", 0, false},
		{"+OK\r", 0, false},
		{"+OK\r\n", 5, true},
		{"+OK\r\n:1\r\n", 5, true},
		{"$3\r\nab", 0, false},
		{"$3\r\nabc\r\n", 9, true},
		{"$-1\r\n", 5, true},
		{"*2\r\n:1\r\n", 0, false},
		{"*2\r\n:1\r\n$1\r\nx\r\n", 15, true},
		{"*2\r\n*1\r\n:1\r\n", 0, false},
		{"*-1\r\n", 5, true},
		{"%1\r\n+a\r\n", 0, false},
		{"%1\r\n+a\r\n:1\r\n", 12, true},
		{"$x\r\n", 4, true}, // malformed: readReply says so
	} {
		n, full := scanReply([]byte(tc.in))
		if n != tc.n || full != tc.full {
			t.Errorf("scanReply(%q) = %d, %v, want %d, %v", tc.in, n, full, tc.n, tc.full)
		}
	}
}

// A reading caller cancelled after its first wait for the reply
// (pollFirst) is told through its ctx's AfterFunc: with no read timeout,
// nothing else would end its wait on a paused server. (The 10 s bound
// only tells a hang from a pass.)
func TestCancelAfterTheFirstWait(t *testing.T) {
	s, _, got, cancel := callToPausedServer(t, Config{})
	time.Sleep(20 * pollFirst) // past the first wait (no signal says so; a shorter one only tests less)
	cancel()
	var r driver.Reply
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		_ = s.Resume()
		<-got
		t.Fatal("Do on a paused server did not return when its ctx was cancelled after its first wait")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	late, ok := errors.AsType[*errs.Late](r.Err)
	if !ok || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("Do cancelled after its first wait = %+v, want an *errs.Late of context.Canceled", r)
	}
	<-late.Done
}

// A dial that ignores its ctx (go-redis's own with TLS) does not hold its
// caller past the ctx's end; the connection it makes afterwards is
// closed, not leaked, and the next call dials anew.
func TestDialThatIgnoresCtx(t *testing.T) {
	release := make(chan struct{})
	made := make(chan net.Conn, 2) // the server's ends of the connections made
	var dials atomic.Int32
	m := New(Config{Dial: func(context.Context) (net.Conn, error) {
		if dials.Add(1) == 1 {
			<-release // the first dial: stuck whatever its ctx does
		}
		client, server := net.Pipe()
		made <- server
		return client, nil
	}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := m.Do(ctx, cmd("PING")); !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("Do while the dial is stuck = %+v, want the ctx's deadline", r)
	}
	close(release)
	first := <-made
	_ = first.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := first.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("reading the connection made after its caller gave up: %v, want io.EOF (closed)", err)
	}
	// the next call has a connection of its own
	next := make(chan driver.Reply, 1)
	go func() { next <- m.Do(context.Background(), cmd("PING")) }()
	second := <-made
	if _, err := readReply(bufio.NewReader(second)); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Write([]byte("+PONG\r\n")); err != nil {
		t.Fatal(err)
	}
	if rep := <-next; rep.Val != "PONG" {
		t.Fatalf("the next call = %+v, want PONG", rep)
	}
	_ = second.Close()
}

// A Dial that returns neither a connection nor an error fails the call
// with an error; it does not crash the process, whether the caller waited
// or had given up by then (its dial then ends on a goroutine of its own).
func TestDialReturnsNoConnection(t *testing.T) {
	release := make(chan struct{})
	ended := make(chan struct{}, 2)
	m := New(Config{Dial: func(context.Context) (net.Conn, error) {
		defer func() { ended <- struct{}{} }()
		<-release
		return nil, nil
	}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := m.Do(ctx, cmd("PING")); !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("Do while the dial is stuck = %+v, want the ctx's deadline", r)
	}
	close(release) // the given-up dial returns (nil, nil) on its goroutine
	<-ended
	if r := m.Do(context.Background(), cmd("PING")); !errors.Is(r.Err, errNoConn) {
		t.Fatalf("Do = %+v, want errNoConn", r)
	}
	<-ended
}

// A call whose write blocks (the server stopped, the socket buffers
// full: calls of 32 KiB from many goroutines) returns when its ctx
// ends, as one whose read blocks does: the caller writing the shared
// buffer hands the rest on when its ctx ends. Without timeouts on the
// connection (go-redis's ReadTimeout -1), so only the ctx bounds it. No
// call succeeds while the server is stopped.
func TestWriteBoundedByCtx(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	// A write that ctx does not bound returns only once the server runs
	// again, 8 s in (without -race the slowest bound one returned 341 ms
	// after its start).
	const callers, bound = 1000, 200 * time.Millisecond
	big := strings.Repeat("x", 32<<10)
	b := redistest.BurstWhilePaused(t, s, callers, bound, 8*time.Second, func(ctx context.Context, i int) error {
		return m.Do(ctx, cmd("SET", fmt.Sprint("big:", i), big)).Err
	})
	t.Logf("%d calls of 32 KiB to a stopped server, ctx %v: slowest returned after %v", callers, bound, b.Slowest)
	if b.AfterResume > 0 {
		t.Errorf("%d calls returned only once the server ran again, 8 s in (slowest: %v): their ctx (%v) did not bound them", b.AfterResume, b.Slowest, bound)
	}
	if b.Succeeded > 0 {
		t.Errorf("%d calls succeeded: their replies came after their ctx ended", b.Succeeded)
	}
}

// A caller whose ctx ends while another holds its connection's lock
// returns all the same (issue 45: a blocked write's backlog of calls
// with names of kilobytes made a convoy on the lock, and callers whose
// ctx had ended waited in it 0.1-0.6 s): before it appended its call (a
// plain ctx error: nothing was sent), and after (an *errs.Late whose
// Done closes once the reply has come).
func TestLockWaitBoundedByCtx(t *testing.T) {
	const bound = 300 * time.Millisecond // ctx ends at once: any lock wait shows as 2 s
	s := redistest.StartT(t, redistest.Options{})
	m, _ := newMux(t, s, Config{ReadTimeout: time.Minute})
	if r := m.Do(context.Background(), cmd("PING")); r.Val != "PONG" {
		t.Fatalf("PING = %+v", r)
	}
	c := m.lanes[callsLane].cur
	held := func(f func()) time.Duration {
		c.mu.Lock()
		unlock := time.AfterFunc(2*time.Second, c.mu.Unlock)
		start := time.Now()
		f()
		took := time.Since(start)
		if !unlock.Stop() {
			t.Fatalf("the call waited for the lock: %v", took)
		}
		c.mu.Unlock()
		return took
	}

	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		var r driver.Reply
		if took := held(func() { r = m.Do(ctx, cmd("ECHO", "x")) }); took > bound {
			t.Errorf("Do waited %v for a held lock, its ctx 20ms", took)
		}
		if _, late := errors.AsType[*errs.Late](r.Err); late || !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("Do = %+v, want ctx's error (not sent)", r)
		}
	})

	t.Run("after", func(t *testing.T) {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Resume() }()
		first := make(chan driver.Reply, 1) // reads: the next call waits for its turn
		go func() { first <- m.Do(context.Background(), cmd("ECHO", "first")) }()
		waitBusy(t, context.Background(), 1)
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan driver.Reply, 1)
		go func() { got <- m.Do(ctx, cmd("ECHO", "late")) }()
		waitQueued(t, c, 2)
		var r driver.Reply
		took := held(func() {
			cancel()
			select {
			case r = <-got:
			case <-time.After(time.Second):
				r = <-got
			}
		})
		if took > bound {
			t.Errorf("Do returned %v after its ctx ended, the lock held", took)
		}
		late, ok := errors.AsType[*errs.Late](r.Err)
		if !ok || !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("Do = %+v, want an *errs.Late of context.Canceled", r)
		}
		select {
		case <-late.Done:
			t.Fatal("Done closed while the server is paused")
		case <-time.After(50 * time.Millisecond):
		}
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		<-late.Done
		if r := <-first; r.Val != "first" {
			t.Errorf("the first call = %+v", r)
		}
		if r := m.Do(context.Background(), cmd("ECHO", "next")); r.Val != "next" {
			t.Fatalf("the call after = %+v, want its own reply", r)
		}
	})
}

// waitQueued waits until n calls await replies on c.
func waitQueued(t *testing.T, c *conn, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		q := len(c.queue) - c.head
		c.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}
