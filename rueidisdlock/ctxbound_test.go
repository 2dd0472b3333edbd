package rueidisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// What makes the driver driver.Info.CtxBound, against what rueidis does
// with a ctx by itself. rueidis's Do returns when its ctx ends while the
// server stalls, but it does not keep a node's commands in order on one
// connection: given a deadline on an idle connection it closes that
// connection when the deadline passes (the command may still run on the
// server) and the next command goes on a new one; and a client made with
// its defaults on a machine of 2 or more CPUs spreads one node's keyed
// commands over several connections (ClientOption.PipelineMultiplex). So
// a command whose caller gave up could run on the server after one sent
// later, and nothing would say when it can no longer run. The driver
// hands rueidis the ctx without its deadline (queued: the connection is
// kept) and its commands without a slot (one connection), so that a PING
// sent after a call gave up is answered only once that call is settled.
func TestWhatMakesItCtxBound(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	ctx := context.Background()
	clientID := func() int64 {
		id, err := client.Do(ctx, client.B().ClientId().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	before := clientID()

	// rueidis's own Do returns at its ctx while the server sleeps...
	stall(t, s, 2*time.Second)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := client.Do(short, client.B().Ping().Build()).Error()
	took := time.Since(start)
	t.Logf("rueidis Do with a 100 ms ctx under DEBUG SLEEP 2 returned after %v: %v", took, err)
	if !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("rueidis Do under DEBUG SLEEP: %v after %v", err, took)
	}
	// ...but the next command goes on another connection.
	if after := clientID(); after == before {
		t.Errorf("the connection was kept (CLIENT ID %d)", after)
	} else {
		t.Logf("the connection was replaced: CLIENT ID %d, then %d", before, after)
	}

	// The driver's does not close it.
	d := rueidisdlock.NewDriver(client)
	if info := d.Info(); !info.CtxBound || !info.AutoPipeline {
		t.Errorf("Info() = %+v: not CtxBound and AutoPipeline", info)
	}
	driverID := func() int64 {
		id, err := d.Do(ctx, driver.Command{Args: []any{"CLIENT", "ID"}}).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	before = driverID()
	stall(t, s, time.Second)
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if r := d.Do(short, driver.Command{Args: []any{"PING"}}); !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Errorf("the driver's Do under DEBUG SLEEP: %+v", r)
	}
	if after := driverID(); after != before {
		t.Errorf("the driver's connection was replaced: CLIENT ID %d, then %d", before, after)
	}

	// Several connections to one node for rueidis's keyed commands, one
	// for the driver's (clients of their own, named, so that CLIENT LIST
	// tells their connections apart).
	admin := s.Client()
	defer admin.Close()
	conns := func(name string, send func(c rueidis.Client, i int)) int {
		c := newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}, ClientName: name})
		done := make(chan struct{})
		for i := range 256 {
			go func() {
				defer func() { done <- struct{}{} }()
				send(c, i)
			}()
		}
		for range 256 {
			<-done
		}
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, " name="+name+" ")
	}
	theirs := conns("theirs", func(c rueidis.Client, i int) {
		c.Do(ctx, c.B().Set().Key(fmt.Sprint("k", i)).Value("v").Build())
	})
	ours := conns("ours", func(c rueidis.Client, i int) {
		rueidisdlock.NewDriver(c).Do(ctx, driver.Command{Args: []any{"SET", fmt.Sprint("k", i), "v"}, FirstKey: 1, Keys: 1})
	})
	t.Logf("256 keyed commands at once on one node (GOMAXPROCS %d): rueidis's on %d connections, the driver's on %d", runtime.GOMAXPROCS(0), theirs, ours)
	if runtime.GOMAXPROCS(0) >= 2 && theirs < 2 {
		t.Errorf("rueidis has %d connection to the node", theirs)
	}
	if ours != 1 {
		t.Errorf("the driver's commands went on %d connections; want 1", ours)
	}
}

// A call given up on returns when its ctx ends, with an *errs.Late whose
// Done closes only once the command can no longer run on the server: here
// once the stalled server has run it; and its write has been made then.
// Do, Pipeline and Dedicated alike. (Before, the driver's Do and Pipeline
// returned only when the command was settled, and the Client ran each on
// a goroutine of its own to return on time; Dedicated still runs on one.)
func TestGivenUpCallSettlesWhenItRan(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	d := rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
	ctx := context.Background()
	if r := d.Do(ctx, driver.Command{Args: []any{"PING"}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, way := range []struct {
		name string
		call func(ctx context.Context, key string) error
	}{
		{"Do", func(ctx context.Context, key string) error {
			return d.Do(ctx, driver.Command{Args: []any{"SET", key, "yes"}, FirstKey: 1, Keys: 1}).Err
		}},
		{"Pipeline", func(ctx context.Context, key string) error {
			return d.Pipeline(ctx, []driver.Command{{Args: []any{"SET", key, "yes"}, FirstKey: 1, Keys: 1}})[0].Err
		}},
		{"Dedicated", func(ctx context.Context, key string) error {
			return d.Dedicated(ctx, key, func(c driver.Conn) error {
				return c.Pipeline(ctx, []driver.Command{{Args: []any{"SET", key, "yes"}, FirstKey: 1, Keys: 1}})[0].Err
			})
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			key := "settled-" + way.name
			stall(t, s, time.Second)
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := way.call(short, key)
			took := time.Since(start)
			late, ok := errors.AsType[*errs.Late](err)
			if !ok || !errors.Is(err, context.DeadlineExceeded) || took > 500*time.Millisecond {
				t.Fatalf("under DEBUG SLEEP 1 with a 100 ms ctx: %v after %v; want an *errs.Late at the ctx's end", err, took)
			}
			select {
			case <-late.Done:
				t.Fatalf("settled on return, %v in, while the server sleeps", took)
			default:
			}
			select {
			case <-late.Done:
			case <-time.After(10 * time.Second):
				t.Fatal("not settled 10 s after the server woke")
			}
			t.Logf("returned after %v, settled after %v", took, time.Since(start))
			if r := d.Do(ctx, driver.Command{Args: []any{"GET", key}, FirstKey: 1, Keys: 1}); r.Val != "yes" {
				t.Errorf("GET once settled = %+v; want the write made", r)
			}
		})
	}
}

// stall makes s sleep for d (DEBUG SLEEP) and returns once it sleeps.
func stall(t *testing.T, s *redistest.Server, d time.Duration) {
	t.Helper()
	admin := s.Client()
	t.Cleanup(func() { _ = admin.Close() })
	slept := make(chan struct{})
	go func() {
		defer close(slept)
		admin.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds())
	}()
	t.Cleanup(func() { <-slept })
	probe := s.Client(func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 50*time.Millisecond, -1 })
	defer probe.Close()
	for probe.Ping(context.Background()).Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// A call that meets its connection broken returns when its ctx ends even
// though rueidis, dialing a new one, waits for the server's answer to its
// HELLO for its own dial timeout (5 s) whatever the ctx says; and so do
// the calls that come while it dials. Here the driver's connection is
// killed, then the server stopped (SIGSTOP: it still accepts connections,
// and answers nothing). Before the driver ran those calls apart, the
// first returned only at rueidis's dial timeout. Once the server runs
// again, a call has its reply and the calls go on their caller's
// goroutine again (counted: no goroutine created).
func TestCallBoundWhileRueidisRedials(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	d := rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
	ctx := context.Background()
	id, err := d.Do(ctx, driver.Command{Args: []any{"CLIENT", "ID"}}).Int64()
	if err != nil {
		t.Fatal(err)
	}
	admin := s.Client()
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // rueidis reads the EOF
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = s.Resume()
		}
	}()
	for i := range 3 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		r := d.Do(short, driver.Command{Args: []any{"SET", "redial", "x"}, FirstKey: 1, Keys: 1})
		took := time.Since(start)
		cancel()
		t.Logf("call %d on a stopped server after its connection was killed: %v after %v", i, r.Err, took)
		if r.Err == nil || took > time.Second {
			t.Errorf("call %d: %+v after %v; want its ctx's error at 200 ms", i, r, took)
		}
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitUntil := time.Now().Add(10 * time.Second)
	for d.Do(ctx, driver.Command{Args: []any{"PING"}}).Err != nil && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ping := func() {
		if r := d.Do(cctx, driver.Command{Args: []any{"PING"}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ping() // run apart: its reply says the connection is up again
	before := goroutinesCreated()
	for range 100 {
		ping()
	}
	if n := goroutinesCreated() - before; n > 5 {
		t.Errorf("%d goroutines created over 100 calls after the server came back; want none per call", n)
	}
}
