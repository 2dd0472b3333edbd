package goredis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A master that left the cluster (here failed over: a replica now serves
// its slots) has its Mux closed and forgotten by a Refresh once no call
// has used it since the last sweep; the Muxes of the masters in use stay.
// (Before, every address a call ever went to kept its Mux, and any
// connection of it, until Close.)
func TestDepartedMasterMuxClosed(t *testing.T) {
	defer func(d time.Duration) { sweepEvery = d }(sweepEvery)
	sweepEvery = 0 // every Refresh sweeps
	c := redistest.StartClusterT(t, redistest.ClusterOptions{})
	rdb := c.Client()
	d := Own(rdb)
	t.Cleanup(func() { _ = d.Close(); _ = rdb.Close() })
	if d.cw == nil {
		t.Fatal("not on dlock's own connections")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	// a key on each master
	var keys []string
	seen := map[string]bool{}
	for i := 0; len(seen) < len(masters); i++ {
		k := fmt.Sprintf("sweep-%d", i)
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		if !seen[m.Addr()] {
			seen[m.Addr()] = true
			keys = append(keys, k)
		}
	}
	// setAll sets every key; a write refused while the cluster settles
	// (MOVED followed, or a node in its failover) is tried again.
	setAll := func() {
		t.Helper()
		for _, k := range keys {
			for {
				r := d.Do(ctx, driver.Command{Args: []any{"SET", k, "v"}, FirstKey: 1, Keys: 1})
				if r.Err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("SET %s: %v", k, r.Err)
				}
			}
		}
	}
	has := func(addr string) bool {
		d.cw.mu.Lock()
		defer d.cw.mu.Unlock()
		return d.cw.muxes[addr] != nil
	}
	setAll()
	old, err := c.MasterOf(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if !has(old.Addr()) {
		t.Fatalf("no Mux for %s, the master of %s", old.Addr(), keys[0])
	}
	replica, err := c.ReplicaOf(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Failover(replica); err != nil {
		t.Fatal(err)
	}
	// Refresh (a sweep), then calls to every key, until go-redis's
	// reloaded map no longer sends one to the old master and a sweep
	// has closed its Mux.
	for deadline := time.Now().Add(20 * time.Second); has(old.Addr()); {
		if time.Now().After(deadline) {
			t.Fatalf("the Mux of %s, a master no more, is still kept", old.Addr())
		}
		d.Refresh()
		setAll()
	}
	d.Refresh() // a sweep right after calls to every master: they all stay
	for _, k := range keys {
		m, err := c.MasterOf(k)
		if err != nil {
			t.Fatal(err)
		}
		if !has(m.Addr()) {
			t.Errorf("the Mux of %s, the master of %s, was closed", m.Addr(), k)
		}
	}
	setAll() // and every key still takes a write
}
