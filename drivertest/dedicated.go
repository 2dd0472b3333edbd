package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// testDedicated: a dedicated connection runs WATCH/MULTI/EXEC
// transactions (an EXEC's array carries a failed command's error reply; a
// WATCH that saw a change makes EXEC's reply nil), keeps one connection
// for all of fn, and returns fn's error. wantPort, when set, is the port
// of the node that key's connection must reach (a cluster's master).
func testDedicated(t *testing.T, d driver.Driver, k string, wantPort ...int) {
	ctx := context.Background()
	if k == "" {
		k = key(t)
	}
	if r := d.Do(ctx, keyed("SET", k, "v")); r.Err != nil {
		t.Fatal(r.Err)
	}
	var got [][]driver.Reply
	ids := map[any]bool{}
	err := d.Dedicated(ctx, k, func(c driver.Conn) error {
		// A command without a key first: the connection is key's anyway.
		id := c.Pipeline(ctx, []driver.Command{cmd("CLIENT", "ID"), cmd("CONFIG", "GET", "port")})
		ids[id[0].Val] = true
		if len(wantPort) > 0 {
			if port := configPort(t, id[1]); port != wantPort[0] {
				t.Errorf("Dedicated(%q) is a connection to port %d; key's master is on %d", k, port, wantPort[0])
			}
		}
		got = append(got, c.Pipeline(ctx, []driver.Command{keyed("WATCH", k), keyed("GET", k)}))
		got = append(got, c.Pipeline(ctx, []driver.Command{
			cmd("MULTI"), keyed("SET", k, "w"), keyed("INCR", k), keyed("GET", k), cmd("EXEC"),
		}))
		id = c.Pipeline(ctx, []driver.Command{cmd("CLIENT", "ID")})
		ids[id[0].Val] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 {
		t.Errorf("fn's pipelines went on %d connections (CLIENT ID %v), want 1", len(ids), ids)
	}
	checks := [][]func(driver.Reply) error{
		{is("OK"), is("v")},
		{is("OK"), is("QUEUED"), is("QUEUED"), is("QUEUED"), func(r driver.Reply) error {
			vs, err := r.Slice()
			if err != nil || len(vs) != 3 || vs[0] != "OK" || vs[2] != "w" {
				return fmt.Errorf("EXEC = %#v, %v; want [OK, <error>, w]", r.Val, r.Err)
			}
			if e, ok := vs[1].(error); !ok || !isReply(e) {
				return fmt.Errorf("EXEC's INCR of a string = %#v, want an ErrorReply", vs[1])
			}
			return nil
		}},
	}
	for i, rs := range got {
		for j, check := range checks[i] {
			if err := check(rs[j]); err != nil {
				t.Errorf("pipeline %d, reply %d: %v", i, j, err)
			}
		}
	}

	// A change after WATCH aborts the transaction: EXEC replies nil.
	err = d.Dedicated(ctx, k, func(c driver.Conn) error {
		if err := firstErr(c.Pipeline(ctx, []driver.Command{keyed("WATCH", k)})); err != nil {
			return err
		}
		if r := d.Do(ctx, keyed("SET", k, "changed")); r.Err != nil {
			return r.Err
		}
		rs := c.Pipeline(ctx, []driver.Command{cmd("MULTI"), keyed("SET", k, "lost"), cmd("EXEC")})
		if r := rs[2]; r.Err != nil || r.Val != nil {
			return fmt.Errorf("EXEC after a watched change = %#v, %v; want a nil reply", r.Val, r.Err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if r := d.Do(ctx, keyed("GET", k)); r.Val != "changed" {
		t.Errorf("GET after an aborted transaction = %+v, want changed", r)
	}

	errFn := errors.New("fn's own error")
	if err := d.Dedicated(ctx, k, func(driver.Conn) error { return errFn }); !errors.Is(err, errFn) {
		t.Errorf("Dedicated returned %v, want fn's error", err)
	}
}

func firstErr(rs []driver.Reply) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// testDedicatedExclusive: goroutines increment a counter with optimistic
// transactions on dedicated connections; none is lost, which a connection
// shared while a transaction is open would show.
func testDedicatedExclusive(t *testing.T, d driver.Driver) {
	const workers, each = 8, 25
	ctx := context.Background()
	k := key(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for done := 0; done < each; {
				err := d.Dedicated(ctx, k, func(c driver.Conn) error {
					rs := c.Pipeline(ctx, []driver.Command{keyed("WATCH", k), keyed("GET", k)})
					if rs[0].Err != nil {
						return rs[0].Err
					}
					n, _ := rs[1].Int64() // nil: 0
					rs = c.Pipeline(ctx, []driver.Command{cmd("MULTI"), keyed("SET", k, n+1), cmd("EXEC")})
					if err := firstErr(rs); err != nil {
						return err
					}
					if rs[2].Val != nil {
						done++
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if r := d.Do(ctx, keyed("GET", k)); r.Val != fmt.Sprint(workers*each) {
		t.Errorf("counter = %+v after %d increments", r, workers*each)
	}
}

// testWait: a WAIT sent on a dedicated connection after a write counts
// the replicas that acknowledged that write: 1 with one replica, 0 while
// that replica is stopped (a WAIT on another connection, whose writes the
// replica had acknowledged, would count 1).
func testWait(t *testing.T, d driver.Driver, k string, replica *redistest.Server) {
	ctx := context.Background()
	wait := func(i int, timeout int) driver.Reply {
		var rs []driver.Reply
		err := d.Dedicated(ctx, k, func(c driver.Conn) error {
			rs = c.Pipeline(ctx, []driver.Command{keyed("SET", k, i), cmd("WAIT", 1, timeout)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := is("OK")(rs[0]); err != nil {
			t.Fatalf("SET: %v", err)
		}
		return rs[1]
	}
	for i := range 10 {
		if err := is(int64(1))(wait(i, 5000)); err != nil {
			t.Fatalf("WAIT 1 after a write, round %d: %v", i, err)
		}
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	r := wait(10, 200)
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := is(int64(0))(r); err != nil {
		t.Errorf("WAIT 1 after a write while the replica is stopped: %v", err)
	}
	if err := is(int64(1))(wait(11, 5000)); err != nil {
		t.Errorf("WAIT 1 after a write once the replica is back: %v", err)
	}
}
