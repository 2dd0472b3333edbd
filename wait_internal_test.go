package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/kinds"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// serverClient starts a redis-server of the test's own and returns a
// Client on it and a go-redis client of it for the test's own commands;
// all end with the test.
func serverClient(t *testing.T) (*Client, *redis.Client) {
	t.Helper()
	s := redistest.StartT(t, redistest.Options{})
	rdb, admin := s.Client(), s.Client()
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
		_ = admin.Close()
	})
	return c, admin
}

// A waiter that is woken but cannot use the wake-up (its ctx ended while
// it tried) passes it on to the next waiter instead of losing it, or that
// waiter sleeps until the holder's whole lease has run out.
func TestWakeUpPassedOnByAWaiterThatGivesUp(t *testing.T) {
	c, rdb := serverClient(t)
	const name, channel = "x", "dlock:{x}:ch"
	ctx := context.Background()

	// X waits first: it is the one a release wakes.
	xctx, xcancel := context.WithCancel(ctx)
	defer xcancel()
	xReady, xDone := make(chan struct{}), make(chan error, 1)
	xChecks := 0
	go func() {
		xDone <- c.acq.WaitLoop(xctx, name, channel, "x", nil, time.Hour, func(ctx context.Context, _ string) (bool, time.Duration, error) {
			xChecks++
			if xChecks == 1 { // subscribed: still held
				close(xReady)
				return false, time.Hour, nil
			}
			xcancel() // woken, and its ctx ends while it tries
			return false, 0, waitEnded(name, context.Canceled)
		})
	}()
	<-xReady

	yReady, yWoken := make(chan struct{}), make(chan struct{})
	yChecks := 0
	yDone := make(chan error, 1)
	go func() {
		yDone <- c.acq.WaitLoop(ctx, name, channel, "y", nil, time.Hour, func(ctx context.Context, _ string) (bool, time.Duration, error) {
			yChecks++
			if yChecks == 1 {
				close(yReady)
				return false, time.Hour, nil
			}
			close(yWoken)
			return true, 0, nil
		})
	}()
	<-yReady

	if err := rdb.Publish(ctx, channel, protocol.WakeOne).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-xDone; err == nil {
		t.Fatal("X's wait ended without its error")
	}
	select {
	case <-yWoken:
	case <-time.After(5 * time.Second):
		t.Fatal("the wake-up X could not use was lost: Y was never woken")
	}
	if err := <-yDone; err != nil {
		t.Fatal(err)
	}
}

// A waiter handed the lock that gives up before it takes it (its ctx
// ended as the release came) passes it on to the next waiter: leaving
// never leaves the lock held by nobody.
func TestHandedLockGivenUpGoesOn(t *testing.T) {
	ctx := context.Background()
	c, rdb := serverClient(t)
	k := c.keys(protocol.MutexKind, "x")
	p := kinds.Mutex{K: k, W: k.Wake}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The release handed the lock to a; b waits behind it.
	rdb.Set(ctx, k.Lock, "a 1 0 1 0 0 ", time.Minute) // a hold (scripts/lib_mutex.lua)
	b := "c1:b:h30000"
	rdb.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: b})
	rdb.ZAdd(ctx, k.Alive, redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: b})
	if err := p.Leave("c0:a:h30000").Run(ctx, goredis.New(rdb)).Err; err != nil {
		t.Fatal(err)
	}
	if got, _ := protocol.ParseHold(rdb.Get(ctx, k.Lock).Val()); got.Token != "b" {
		t.Fatalf("after a gave up the lock is %v; want it handed to b", got)
	}
	if n := rdb.ZCard(ctx, k.Queue).Val(); n != 0 {
		t.Fatalf("%d waiters left in the queue; want none", n)
	}
}

// A message naming a waiter that comes between the waiter's attempt and
// its joining the hub is kept for it: on its Client's own channel, which
// stays subscribed, the waiter does not check the lock when it joins (a
// message for it could not have been missed while it was subscribed),
// so a message dropped there costs it its whole wait bound. (Found by the
// RWMutex phase tests: waits of QueueTTL/3 now and then.)
func TestMessageBeforeJoinIsKept(t *testing.T) {
	c, admin := serverClient(t)
	ctx := context.Background()
	own := c.wakeTo(&protocol.Keys{}).Base + c.id

	// Another waiter keeps the Client's own channel subscribed.
	other := make(chan struct{}, 1)
	w0, err := c.hubs[0].Join(own, "z", other)
	if err != nil {
		t.Fatal(err)
	}
	defer c.hubs[0].Leave(w0)
	<-w0.Ready

	// The waiter's attempt has been made (the epochs are read before
	// it); the release that names it comes before it joins.
	seen := c.acq.Epochs(own)
	if err := admin.Publish(ctx, own, c.id+":T").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Publish(ctx, own, c.id+":z").Err(); err != nil { // after it, on the same connection
		t.Fatal(err)
	}
	<-other // so the message for T has been received

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := ""
	err = c.acq.WaitLoop(wctx, "x", own, "T", seen, time.Hour, func(ctx context.Context, msg string) (bool, time.Duration, error) {
		got = msg
		return true, 0, nil
	})
	if err != nil {
		t.Fatalf("the waiter named by a message that came before it joined was not woken: %v", err)
	}
	if got != c.id+":T" {
		t.Fatalf("woken with message %q; want %q", got, c.id+":T")
	}
}

// transient tells a cluster's answers during a move or a failover from
// every other error: those a Lock waits through (see "Topology changes" in internal/transport/topology.go).
func TestTransient(t *testing.T) {
	reply := func(msg string) error { return &driver.ErrorReply{Err: errors.New(msg)} }
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{reply("MOVED 3999 127.0.0.1:6381"), true},
		{reply("ASK 3999 127.0.0.1:6381"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{fmt.Errorf("%w: WAIT: %w", ErrReplicaSync, reply("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)")), true},
		{reply("ERR Script attempted to access a non local key in a cluster node script: abc, on @user_script:407."), true},
		{reply("Script attempted to access a non local key in a cluster node script: abc"), true}, // rueidis
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{io.EOF, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{reply("NOPERM this user has no permissions"), false},
		{reply("ERR unknown command"), false},
		{fmt.Errorf("%w: 0 of 1 replicas acknowledged within 1s", ErrReplicaSync), false},
		{context.DeadlineExceeded, false},
		{ErrInvalidArgument, false},
	} {
		if got := transport.Transient(tt.err); got != tt.want {
			t.Errorf("transport.Transient(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
