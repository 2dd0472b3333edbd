package dlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Latch calls that reach the server twice (a client's re-send) or late
// (a copy given up on, delivered after the latch began a new phase).

// stallOnce makes s sleep (DEBUG SLEEP d) on a connection of its own and
// returns once the server is asleep: a probe without retries no longer
// gets its PING answered. wait waits for the DEBUG SLEEP's reply.
func stallOnce(t *testing.T, s *redistest.Server, d time.Duration) (wait func()) {
	t.Helper()
	sleeper := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	probe := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 50*time.Millisecond, -1 })
	ctx := context.Background()
	if err := probe.Ping(ctx).Err(); err != nil { // connected before the stall
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- sleeper.Do(ctx, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
	}()
	for start := time.Now(); probe.Ping(ctx).Err() == nil; {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the server never stalled")
		}
	}
	return func() {
		if err := <-done; err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
	}
}

// scriptCalls is how many times s has run scripts (EVALSHA and EVAL).
// (a call the server refused, NOSCRIPT, is not counted).
func scriptCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := newRedis(t, s).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, rest, _ := strings.Cut(v, ",")
				_, failed, _ := strings.Cut(rest, "failed_calls=")
				c, _ := strconv.Atoi(calls)
				f, _ := strconv.Atoi(failed)
				n += c - f
			}
		}
	}
	return n
}

// resendClient is a dlock Client on go-redis (through the client: not on
// connections of its own, WithoutOwnConnections) with a short ReadTimeout and
// go-redis's default MaxRetries (3): a reply that takes longer than the
// ReadTimeout makes go-redis send the command again.
func resendClient(t *testing.T, s *redistest.Server) *dlock.Client {
	t.Helper()
	rdb := newRedis(t, s, func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond })
	// Connections ready in the pool: a re-send goes out on one at once
	// (a new one would wait for the stalled server to answer its HELLO).
	ctx := context.Background()
	var conns []*redis.Conn
	for range 4 {
		cn := rdb.Conn()
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		_ = cn.Close()
	}
	c, err := dlock.New(rdb, dlock.WithoutOwnConnections()) // go-redis re-sends; dlock's own connections never do
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Finding 10: the server stalls longer than the client's ReadTimeout;
// go-redis re-sends the CountDown and the server runs both copies. The
// count must drop by one, and CountDown must say so.
func TestLatchCountDownResentCountsOnce(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	c := resendClient(t, s)
	l := c.Latch(lockName(t))
	if ok, err := l.TrySetCount(ctx, 4, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if n, err := l.CountDown(ctx); n != 3 || err != nil { // the script loaded
		t.Fatalf("CountDown = %d, %v", n, err)
	}
	before := scriptCalls(t, s)
	wait := stallOnce(t, s, 800*time.Millisecond)
	n, err := l.CountDown(ctx)
	wait()
	if runs := scriptCalls(t, s) - before; runs < 2 {
		t.Fatalf("the server ran %d count-down scripts: go-redis did not re-send, the test shows nothing (%d, %v)", runs, n, err)
	}
	left, cerr := l.Count(ctx)
	if err != nil || cerr != nil || n != 2 || left != 2 {
		t.Fatalf("one re-sent CountDown from 3: returned %d, %v; the count is now %d, %v; want 2, 2", n, err, left, cerr)
	}
}

// Finding 10: a re-sent TrySetCount whose first copy set the count
// reports that it did.
func TestLatchTrySetCountResentReportsTrue(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	c := resendClient(t, s)
	l := c.Latch(lockName(t))
	if ok, err := c.Latch(lockName(t)).TrySetCount(ctx, 1, time.Minute); !ok || err != nil { // the script loaded
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	before := scriptCalls(t, s)
	wait := stallOnce(t, s, 800*time.Millisecond)
	ok, err := l.TrySetCount(ctx, 3, time.Minute)
	wait()
	if runs := scriptCalls(t, s) - before; runs < 2 {
		t.Fatalf("the server ran %d scripts: go-redis did not re-send, the test shows nothing (%v, %v)", runs, ok, err)
	}
	left, cerr := l.Count(ctx)
	if !ok || err != nil || left != 3 || cerr != nil {
		t.Fatalf("a re-sent TrySetCount(3) on a latch without a count: %v, %v; the count is %d, %v; want true and 3", ok, err, left, cerr)
	}
	// The same on a latch that had a count and was opened before.
	if n, err := l.CountDown(ctx); n != 2 || err != nil {
		t.Fatalf("CountDown = %d, %v", n, err)
	}
}

// holdDriver keeps the script calls it is told to hold: they are recorded
// and not sent, and the caller is told its ctx ended, as when a command's
// bytes wait in the network past the caller's give-up. replay sends them
// later, exactly as they were, as the network would deliver them.
type holdDriver struct {
	driver.Driver
	mu   sync.Mutex
	hold bool
	held []driver.Command
	last []driver.Command // the calls replay sent last
}

func (d *holdDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	d.mu.Lock()
	name, _ := c.Args[0].(string)
	if d.hold && strings.HasPrefix(strings.ToUpper(name), "EVAL") {
		d.held = append(d.held, c)
		d.mu.Unlock()
		return driver.Reply{Err: context.DeadlineExceeded}
	}
	d.mu.Unlock()
	return d.Driver.Do(ctx, c)
}

func (d *holdDriver) setHold(on bool) {
	d.mu.Lock()
	d.hold = on
	d.mu.Unlock()
}

// replay sends the held calls and returns their replies.
func (d *holdDriver) replay(ctx context.Context) []driver.Reply {
	d.mu.Lock()
	held := d.held
	d.held, d.last = nil, held
	d.mu.Unlock()
	var out []driver.Reply
	for _, c := range held {
		out = append(out, d.Driver.Do(ctx, c))
	}
	return out
}

// again holds the calls replay sent last once more: the same bytes, to be
// delivered a second time.
func (d *holdDriver) again() {
	d.mu.Lock()
	d.held = append(d.held, d.last...)
	d.mu.Unlock()
}

// holdingClient is a dlock Client on the shared server whose script calls
// hd can hold.
func holdingClient(t *testing.T) (*dlock.Client, *holdDriver) {
	t.Helper()
	var hd *holdDriver
	c := seamClient(t, func(d driver.Driver) driver.Driver { hd = &holdDriver{Driver: d}; return hd })
	return c, hd
}

// Finding 11: a CountDownOnce is given up on (its bytes held), retried
// with the same id, which opens the latch; TrySetCount(2) begins a new
// phase; then the held copy reaches the server. It belongs to the phase
// that ended and must not count in the new one.
func TestLatchLateCountDownOnceStaysInItsPhase(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	coord := client(t).Latch(name)
	wc, hd := holdingClient(t)
	worker := wc.Latch(name)
	if ok, err := coord.TrySetCount(ctx, 1, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if n, err := worker.Count(ctx); n != 1 || err != nil {
		t.Fatalf("Count = %d, %v", n, err)
	}
	hd.setHold(true)
	if _, err := worker.CountDownOnce(ctx, "w1"); err == nil {
		t.Fatal("a CountDownOnce whose command was held succeeded")
	}
	hd.setHold(false)
	if n, err := worker.CountDownOnce(ctx, "w1"); n != 0 || err != nil {
		t.Fatalf("the retried CountDownOnce = %d, %v; want 0 (open)", n, err)
	}
	if ok, err := coord.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount of the next phase = %v, %v", ok, err)
	}
	for _, r := range hd.replay(ctx) {
		if r.Err != nil {
			t.Fatalf("the late copy: %v", r.Err)
		}
	}
	if n, err := coord.Count(ctx); n != 2 || err != nil {
		t.Fatalf("after a late copy of the last phase's CountDownOnce, the new phase's count is %d, %v; want 2", n, err)
	}
	// The worker counts in the new phase as usual.
	if n, err := worker.CountDownOnce(ctx, "w1"); n != 1 || err != nil {
		t.Fatalf("CountDownOnce in the new phase = %d, %v; want 1", n, err)
	}
}

// A CountDown that ran but whose reply was lost, delivered again after
// its phase ended and a new one began (as a re-send of the same bytes
// would be): it does not count in the new phase.
func TestLatchCountDownCopyAfterPhaseChange(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	coord := client(t).Latch(name)
	wc, hd := holdingClient(t)
	worker := wc.Latch(name)
	if ok, err := coord.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if _, err := worker.Count(ctx); err != nil {
		t.Fatal(err)
	}
	hd.setHold(true)
	if _, err := worker.CountDown(ctx); err == nil {
		t.Fatal("a CountDown whose command was held succeeded")
	}
	hd.setHold(false)
	for _, r := range hd.replay(ctx) { // it runs once: 2 -> 1
		if r.Err != nil {
			t.Fatalf("the first copy: %v", r.Err)
		}
	}
	hd.again()
	if n, err := coord.Count(ctx); n != 1 || err != nil {
		t.Fatalf("Count after one CountDown = %d, %v", n, err)
	}
	if n, err := coord.CountDown(ctx); n != 0 || err != nil {
		t.Fatalf("CountDown = %d, %v", n, err)
	}
	if ok, err := coord.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount of the next phase = %v, %v", ok, err)
	}
	for _, r := range hd.replay(ctx) {
		if r.Err != nil {
			t.Fatalf("the second copy: %v", r.Err)
		}
	}
	if n, err := coord.Count(ctx); n != 2 || err != nil {
		t.Fatalf("a copy of a CountDown of the last phase counted in the new one: %d, %v; want 2", n, err)
	}
}

// A handle that learned its phase before the latch was opened and set
// again counts in the phase now current: its first attempt is refused
// ('moved' when its phase is the last one, 'unsure' when older) and made
// again in the current phase.
func TestLatchHandleCountsInTheCurrentPhase(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	coord := client(t).Latch(name)
	worker := client(t).Latch(name)
	for _, phasesOn := range []int{1, 2} {
		if ok, err := coord.TrySetCount(ctx, 1, time.Minute); !ok || err != nil {
			t.Fatalf("TrySetCount = %v, %v", ok, err)
		}
		if n, err := worker.Count(ctx); n != 1 || err != nil {
			t.Fatalf("Count = %d, %v", n, err)
		}
		for i := range phasesOn {
			if n, err := coord.CountDown(ctx); n != 0 || err != nil {
				t.Fatalf("CountDown = %d, %v", n, err)
			}
			count := int64(1)
			if i == phasesOn-1 {
				count = 3
			}
			if ok, err := coord.TrySetCount(ctx, count, time.Minute); !ok || err != nil {
				t.Fatalf("TrySetCount = %v, %v", ok, err)
			}
		}
		if n, err := worker.CountDown(ctx); n != 2 || err != nil {
			t.Fatalf("%d phases on, CountDown by a handle of an earlier phase = %d, %v; want 2", phasesOn, n, err)
		}
		for want := int64(1); want >= 0; want-- {
			if n, err := coord.CountDown(ctx); n != want || err != nil {
				t.Fatalf("CountDown = %d, %v; want %d", n, err, want)
			}
		}
	}
}

// resendDriver plays go-redis's re-send of one script call: the call
// runs, its reply is lost, and the same bytes are sent again once the
// test says so; the caller gets the second copy's reply.
type resendDriver struct {
	driver.Driver
	mu      sync.Mutex
	armed   bool
	ran     chan struct{} // closed once the first copy ran
	resend  chan struct{} // closed by the test: send the copy
	results chan driver.Reply
}

func (d *resendDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	d.mu.Lock()
	name, _ := c.Args[0].(string)
	armed := d.armed && strings.HasPrefix(strings.ToUpper(name), "EVAL")
	if armed {
		d.armed = false
	}
	d.mu.Unlock()
	if !armed {
		return d.Driver.Do(ctx, c)
	}
	d.results <- d.Driver.Do(ctx, c) // the first copy: its reply is lost
	close(d.ran)
	<-d.resend
	return d.Driver.Do(ctx, c)
}

// A CountDown whose first copy counted, its reply lost, and whose re-send
// reaches the server after that phase ended and a new one began: the call
// is answered as its first copy was, and the new phase is not counted.
func TestLatchResentCountDownAcrossPhases(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	coord := client(t).Latch(name)
	var rd *resendDriver
	wc := seamClient(t, func(d driver.Driver) driver.Driver {
		rd = &resendDriver{Driver: d, ran: make(chan struct{}), resend: make(chan struct{}), results: make(chan driver.Reply, 1)}
		return rd
	})
	worker := wc.Latch(name)
	// The server must know CountDown's script before the armed call: run
	// alone, its first EVALSHA would answer NOSCRIPT, and the copy under
	// test would be the EVAL that follows.
	warm := wc.Latch(name + "/warm")
	if ok, err := warm.TrySetCount(ctx, 1, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount of the warm-up latch = %v, %v", ok, err)
	}
	if _, err := warm.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := coord.TrySetCount(ctx, 3, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if _, err := worker.Count(ctx); err != nil {
		t.Fatal(err)
	}
	rd.mu.Lock()
	rd.armed = true
	rd.mu.Unlock()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := worker.CountDown(ctx)
		done <- result{n, err}
	}()
	<-rd.ran
	if r := <-rd.results; r.Err != nil {
		t.Fatalf("the first copy: %v", r.Err)
	}
	for want := int64(1); want >= 0; want-- {
		if n, err := coord.CountDown(ctx); n != want || err != nil {
			t.Fatalf("CountDown = %d, %v; want %d", n, err, want)
		}
	}
	if ok, err := coord.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount of the next phase = %v, %v", ok, err)
	}
	close(rd.resend)
	r := <-done
	if r.n != 2 || r.err != nil {
		t.Errorf("the re-sent CountDown = %d, %v; want 2 (what its first copy left), nil", r.n, r.err)
	}
	if n, err := coord.Count(ctx); n != 2 || err != nil {
		t.Errorf("a re-sent CountDown of the last phase counted in the new one: %d, %v; want 2", n, err)
	}
}

// Every key of a latch expires, never later than the latch's TTL, also
// once it is open and after phases.
func TestLatchKeysExpireWithTheLatch(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	rdb := newRedis(t, srv)
	l := newClient(t, rdb, dlock.WithPrefix("ttl-test")).Latch(name)
	check := func(ttl time.Duration) {
		t.Helper()
		keys, err := rdb.Keys(ctx, "ttl-test:{"+name+"}*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("keys: %v, %v", keys, err)
		}
		for _, k := range keys {
			if left, err := rdb.PTTL(ctx, k).Result(); err != nil || left <= 0 || left > ttl {
				t.Errorf("%s expires in %v, %v; want within the latch's TTL %v", k, left, err, ttl)
			}
		}
	}
	for _, ttl := range []time.Duration{time.Minute, 10 * time.Second, time.Minute} {
		if ok, err := l.TrySetCount(ctx, 2, ttl); !ok || err != nil {
			t.Fatalf("TrySetCount = %v, %v", ok, err)
		}
		_, _ = l.CountDownOnce(ctx, "a")
		check(ttl)
		_, _ = l.CountDown(ctx)
		check(ttl)
	}
}
