package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"
)

// counting is a Driver that records what reaches the driver below it:
// the single commands (Do) and the size of each pipeline.
type counting struct {
	driver.Driver
	mu       sync.Mutex
	dos      int
	pipes    []int
	entered  chan struct{} // gets a value when a Do starts
	returned atomic.Int32  // Do calls that returned
}

func (c *counting) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	c.mu.Lock()
	c.dos++
	c.mu.Unlock()
	select {
	case c.entered <- struct{}{}:
	default:
	}
	defer c.returned.Add(1)
	return c.Driver.Do(ctx, cmd)
}

// counts returns the single commands and the pipelines' sizes so far.
func (c *counting) counts() (int, []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dos, slices.Clone(c.pipes)
}

func (c *counting) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	c.mu.Lock()
	c.pipes = append(c.pipes, len(cmds))
	c.mu.Unlock()
	return c.Driver.Pipeline(ctx, cmds)
}

// counted returns go-redis's driver on srv, counted, with a connection
// in its pool already.
func counted(t *testing.T) *counting {
	t.Helper()
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return &counting{Driver: goredis.New(rdb), entered: make(chan struct{}, 1)}
}

// stopped stops srv (SIGSTOP) until the returned func, or the test's end.
func stopped(t *testing.T) (resume func()) {
	t.Helper()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := srv.Resume(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// waitFor polls cond, under p's lock, until it holds (or fails the test).
func waitFor(t *testing.T, p *pipelined, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		p.mu.Lock()
		ok := cond()
		p.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// within returns an errs.Late when ctx ends before f returns, and the
// An errs.Late of within is settled when f has returned, not before.
func TestWithinGivesUpWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var returned atomic.Bool
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	v, err := within(ctx, func() int {
		close(started)
		<-release
		returned.Store(true)
		return 1
	})
	if v != 0 || !errors.Is(err, context.Canceled) || !GaveUp(err) {
		t.Fatalf("within: %v, %v; want 0 and an errs.Late of context.Canceled", v, err)
	}
	select {
	case <-Settled(err):
		t.Fatal("settled while f still runs")
	default:
	}
	close(release)
	<-Settled(err)
	if !returned.Load() {
		t.Fatal("settled before f returned")
	}
}

// A ctx that has ended sends nothing: within does not run f, and the
// error, an errs.Late, is settled at once. A ctx that cannot end runs f on
// the caller's goroutine.
func TestWithinEndedCtxSendsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := within(ctx, func() int { t.Error("f ran with an ended ctx"); return 1 })
	if !GaveUp(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("within an ended ctx: %v; want an errs.Late of context.Canceled", err)
	}
	select {
	case <-Settled(err):
	default:
		t.Fatal("the errs.Late of an ended ctx is not settled at once")
	}
	v, err := within(context.Background(), func() int { return 2 })
	if v != 2 || err != nil {
		t.Fatalf("within Background: %v, %v", v, err)
	}
	if GaveUp(errors.New("x")) || GaveUp(nil) {
		t.Fatal("GaveUp of an error that is no errs.Late")
	}
	select {
	case <-Settled(errors.New("x")):
	default:
		t.Fatal("Settled of an error that is no errs.Late is not closed")
	}
}

// A call to a stopped server returns when its ctx ends, with an errs.Late;
// the call is settled once the driver below has returned (its reply came
// when the server went on), and the command ran.
func TestCallIsBoundByItsCtx(t *testing.T) {
	d := counted(t)
	p := newPipelined(d)
	key := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	resume := stopped(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan driver.Reply, 1)
	go func() { got <- p.Do(ctx, protocol.Keyed("SET", key, "late")) }()
	<-d.entered
	// Sampling, not synchronisation: go-redis writes the command (to a
	// connection of its pool) soon after its Do starts; the test holds
	// whether it did or not (see the GET below).
	time.Sleep(20 * time.Millisecond)
	cancel()
	var r driver.Reply
	select {
	case r = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("Do did not return within 2s of its ctx ending")
	}
	if !GaveUp(r.Err) || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("Do on a stopped server: %v; want an errs.Late of context.Canceled", r.Err)
	}
	if n := d.returned.Load(); n != 0 {
		t.Fatalf("the driver returned before the server went on (%d)", n)
	}
	resume()
	select {
	case <-Settled(r.Err):
	case <-time.After(5 * time.Second):
		t.Fatal("not settled within 5s of the server going on")
	}
	if n := d.returned.Load(); n != 1 {
		t.Fatalf("settled, but the driver's Do returned %d times; want 1", n)
	}
	// The SET ran when the server went on, unless go-redis saw the ctx
	// end before it wrote it (a loaded machine): then nothing ran.
	if v := p.Do(context.Background(), protocol.Keyed("GET", key)); v.Err != nil || v.Val != "late" && v.Val != nil {
		t.Fatalf("GET after the late SET: %v, %v; want late, or nothing if it was never written", v.Val, v.Err)
	}
}

// While maxBatches calls are in flight the others queue, and go together
// as one pipeline when the first returns.
func TestCallsInFlightShareAPipeline(t *testing.T) {
	d := counted(t)
	p := newPipelined(d)
	if p.bound || p.auto {
		t.Fatal("go-redis's driver taken for one that batches calls itself")
	}
	key := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	const n = maxBatches + 6
	resume := stopped(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replies := make([]driver.Reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = p.Do(ctx, protocol.Keyed("SET", fmt.Sprintf("%s/%d", key, i), i)) })
	}
	waitFor(t, p, "all calls in flight or queued", func() bool {
		return p.inflight == maxBatches && len(p.queued) == n-maxBatches
	})
	resume()
	wg.Wait()
	for i, r := range replies {
		if r.Err != nil || r.Val != "OK" {
			t.Errorf("call %d: %v, %v", i, r.Val, r.Err)
		}
	}
	if dos, pipes := d.counts(); dos != maxBatches || !slices.Equal(pipes, []int{n - maxBatches}) {
		t.Fatalf("%d calls went as %d on their own and pipelines %v; want %d and [%d]", n, dos, pipes, maxBatches, n-maxBatches)
	}
	waitFor(t, p, "every batch slot free", func() bool { return p.inflight == 0 && len(p.queued) == 0 })
}

// A call whose ctx ends while it is queued is taken back unsent: its
// error is the ctx's (no errs.Late: nothing may still run), and nothing
// of it reaches Redis.
func TestQueuedCallGivenUpIsNotSent(t *testing.T) {
	d := counted(t)
	p := newPipelined(d)
	key := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	resume := stopped(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range maxBatches {
		wg.Go(func() {
			if r := p.Do(ctx, protocol.Keyed("SET", fmt.Sprintf("%s/%d", key, i), i)); r.Err != nil {
				t.Errorf("call %d: %v", i, r.Err)
			}
		})
	}
	waitFor(t, p, "every batch slot taken", func() bool { return p.inflight == maxBatches })
	qctx, qcancel := context.WithCancel(ctx)
	got := make(chan driver.Reply, 1)
	go func() { got <- p.Do(qctx, protocol.Keyed("SET", key+"/queued", "x")) }()
	waitFor(t, p, "the call queued", func() bool { return len(p.queued) == 1 })
	qcancel()
	r := <-got
	if !errors.Is(r.Err, context.Canceled) || GaveUp(r.Err) {
		t.Fatalf("the queued call: %v; want context.Canceled, not an errs.Late", r.Err)
	}
	resume()
	wg.Wait()
	if v := p.Do(context.Background(), protocol.Keyed("EXISTS", key+"/queued")); v.Val != int64(0) {
		t.Fatalf("EXISTS of the given-up call's key: %v, %v; want 0", v.Val, v.Err)
	}
	if dos, pipes := d.counts(); dos != maxBatches+1 || len(pipes) != 0 {
		t.Fatalf("the driver got %d single calls and pipelines %v; want %d (the EXISTS included) and none", dos, pipes, maxBatches+1)
	}
}

// A driver that bounds and batches its calls itself is left to it; one
// that batches but does not bound them is bounded. newPipelined does not
// wrap twice.
func TestPipelinedLeavesToTheDriver(t *testing.T) {
	for _, c := range []struct {
		info        driver.Info
		bound, auto bool
	}{
		{driver.Info{}, false, false},
		{driver.Info{AutoPipeline: true}, false, true},
		{driver.Info{CtxBound: true}, false, false},
		{driver.Info{AutoPipeline: true, CtxBound: true}, true, false},
	} {
		p := newPipelined(infoDriver{info: c.info})
		if p.bound != c.bound || p.auto != c.auto {
			t.Errorf("%+v: bound %v auto %v; want %v %v", c.info, p.bound, p.auto, c.bound, c.auto)
		}
		if newPipelined(p) != p {
			t.Errorf("%+v: wrapped twice", c.info)
		}
	}
}

type infoDriver struct {
	driver.Driver
	info driver.Info
}

func (d infoDriver) Info() driver.Info { return d.info }
