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
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Why the driver is not driver.Info.CtxBound. rueidis's Do does return
// when its ctx ends while the server stalls, but it does not keep a
// node's commands in order on one connection: a command whose ctx ended
// on an idle connection closes that connection (it may still run on the
// server) and the next command goes on a new one; and a client made with
// its defaults on a machine of 2 or more CPUs spreads one node's keyed
// commands over several connections (ClientOption.PipelineMultiplex). So
// a command whose caller gave up may run on the server after one sent
// later. The driver therefore does not let a ctx cut a command short: Do
// returns when the command is settled (its reply came, or rueidis gave
// up the connection), which is what dlock needs to know before it undoes
// a grant that came too late.
func TestWhyNotCtxBound(t *testing.T) {
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

	// Several connections to one node for keyed commands.
	admin := s.Client()
	defer admin.Close()
	done := make(chan struct{})
	for i := range 256 {
		go func() {
			defer func() { done <- struct{}{} }()
			client.Do(ctx, client.B().Set().Key(fmt.Sprint("k", i)).Value("v").Build())
		}()
	}
	for range 256 {
		<-done
	}
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	conns := len(strings.Split(strings.TrimSpace(list), "\n")) - 1 // not admin's
	t.Logf("rueidis has %d connections to one node (GOMAXPROCS %d)", conns, runtime.GOMAXPROCS(0))
	if runtime.GOMAXPROCS(0) >= 2 && conns < 2 {
		t.Errorf("rueidis has %d connection to the node", conns)
	}
	if info := rueidisdlock.NewDriver(client).Info(); info.CtxBound {
		t.Errorf("Info() = %+v: CtxBound", info)
	}
}

// The driver's Do returns when its command is settled, not when its ctx
// ends: the write it was given has been made when it returns.
func TestDoReturnsWhenSettled(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	d := rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: []string{s.Addr()}}))
	ctx := context.Background()
	if r := d.Do(ctx, driver.Command{Args: []any{"PING"}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	stall(t, s, time.Second)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := d.Do(short, driver.Command{Args: []any{"SET", "settled", "yes"}, FirstKey: 1, Keys: 1})
	if r.Err != nil || time.Since(start) < 500*time.Millisecond {
		t.Errorf("Do under DEBUG SLEEP 1 with a 100 ms ctx: %+v after %v; want its reply, after the sleep", r, time.Since(start))
	}
	if r := d.Do(ctx, driver.Command{Args: []any{"GET", "settled"}, FirstKey: 1, Keys: 1}); r.Val != "yes" {
		t.Errorf("GET after = %+v", r)
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
