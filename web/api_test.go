package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// serve starts the handler of c with opts on a test server, closed with
// the test.
func serve(t *testing.T, c *dlock.Client, opts Options) (*httptest.Server, *handler) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	h, ok := New(c, opts).(*handler)
	if !ok {
		t.Fatalf("New with %+v: not a working handler (options: %v)", opts, opts.Check())
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h
}

// get fetches path and returns the body, failing the test unless the
// status is want.
func get(t *testing.T, srv *httptest.Server, path string, want int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d: %s", path, resp.Status, want, b)
	}
	return string(b)
}

// viewOf fetches /api/snapshot.
func viewOf(t *testing.T, srv *httptest.Server) viewJSON {
	t.Helper()
	var v viewJSON
	if err := json.Unmarshal([]byte(get(t, srv, "/api/snapshot", 200)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSnapshotJSON: a held lock with a label and two waiters, in order,
// as /api/snapshot shows them.
func TestSnapshotJSON(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	holder := newClient(t, prefix, "holder-client")
	l, err := holder.Mutex("orders", dlock.WithLabel("order-42")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for i, label := range []string{"first", "second"} {
		c := newClient(t, prefix, label)
		lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) { return c.Mutex("orders").Lock(ctx) })
		waitWaiters(t, holder, dlock.KindMutex, "orders", i+1)
	}
	srv, _ := serve(t, holder, Options{Refresh: 100 * time.Millisecond})
	v := viewOf(t, srv)
	if len(v.Locks) != 1 {
		t.Fatalf("%d locks, want 1: %+v", len(v.Locks), v.Locks)
	}
	lk := v.Locks[0]
	if lk.Name != "orders" || !lk.Held || len(lk.Holders) != 1 || lk.Holders[0].Label != "order-42" ||
		lk.Holders[0].Owner == nil || lk.Holders[0].Owner.Label != "holder-client" || lk.Holders[0].Fence != l.Fence() {
		t.Errorf("lock %+v, holder %+v", lk, lk.Holders)
	}
	if len(lk.Waiters) != 2 || lk.Waiters[0].Owner.Label != "first" || lk.Waiters[1].Owner.Label != "second" {
		t.Errorf("waiters %+v, want first then second", lk.Waiters)
	}
	if v.Error != "" || v.At == "" || v.RefreshMs != 100 || v.Limit != 1000 {
		t.Errorf("view: error %q, at %q, refresh %d, limit %d", v.Error, v.At, v.RefreshMs, v.Limit)
	}
}

// TestOneSnapshotForEveryViewer: twenty pages open on the feed, and
// clients hammering /api/snapshot and /metrics, cost one Snapshot a
// refresh interval between them (counted); every page gets the
// refreshes; once everyone has gone, no Snapshot at all.
func TestOneSnapshotForEveryViewer(t *testing.T) {
	prefix := testPrefix(t)
	c := newClient(t, prefix, "")
	ctx := testCtx(t)
	l, err := c.Mutex("busy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	var reads atomic.Int64
	const interval = 200 * time.Millisecond
	srv, h := serve(t, c, Options{Refresh: interval, source: func(ctx context.Context, o dlock.SnapshotOptions) (*dlock.Snapshot, error) {
		reads.Add(1)
		return c.Snapshot(ctx, o)
	}})

	viewCtx, stopViewing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	events := make([]atomic.Int64, 20)
	start := time.Now()
	for i := range events {
		req, _ := http.NewRequestWithContext(viewCtx, "GET", srv.URL+"/events", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("/events: Content-Type %q", ct)
		}
		wg.Go(func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"busy"`) {
					events[i].Add(1)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for _, path := range []string{"/api/snapshot", "/metrics"} {
				for viewCtx.Err() == nil {
					req, _ := http.NewRequestWithContext(viewCtx, "GET", srv.URL+path, nil)
					if resp, err := srv.Client().Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if path == "/api/snapshot" && time.Since(start) > 5*interval {
						break
					}
				}
			}
		})
	}
	waitFor(t, 10*time.Second, "10 refreshes seen by every page", func() bool {
		for i := range events {
			if events[i].Load() < 10 {
				return false
			}
		}
		return true
	})
	elapsed := time.Since(start)
	n := reads.Load()
	stopViewing()
	wg.Wait()
	if max := int64(elapsed/interval) + 2; n > max {
		t.Errorf("%d Snapshots in %v (interval %v) with 20 pages and 4 API clients: want at most %d", n, elapsed, interval, max)
	}
	t.Logf("%d Snapshots in %v for 20 pages and 4 API clients", n, elapsed)

	// nobody looks: no read (a read under way when the last page left
	// ends first)
	waitFor(t, 5*time.Second, "the last read ended", func() bool {
		h.snaps.mu.Lock()
		defer h.snaps.mu.Unlock()
		return h.snaps.inflight == nil
	})
	idle := reads.Load()
	time.Sleep(5 * interval) // nothing to wait for: this measures that nothing happens
	if got := reads.Load(); got != idle {
		t.Errorf("%d Snapshots while nobody looked", got-idle)
	}
}

// TestBadOptions: options that fail Check make a handler that says why,
// with 500, and never reads Redis.
func TestBadOptions(t *testing.T) {
	c := newClient(t, testPrefix(t), "")
	for _, o := range []Options{{Pattern: "["}, {Limit: -1}, {Refresh: time.Millisecond}, {Timeout: -time.Second}} {
		if o.Check() == nil {
			t.Errorf("Check(%+v) = nil", o)
			continue
		}
		rec := httptest.NewRecorder()
		New(c, o).ServeHTTP(rec, httptest.NewRequest("GET", "/api/snapshot", nil))
		if rec.Code != 500 || !strings.Contains(rec.Body.String(), "dlock/web") {
			t.Errorf("options %+v: %d %q", o, rec.Code, rec.Body.String())
		}
	}
	if err := (Options{}).Check(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}

// TestPageAndAssets: the page, its script and style are served with a
// policy that loads nothing from elsewhere; unknown paths are 404.
func TestPageAndAssets(t *testing.T) {
	srv, _ := serve(t, newClient(t, testPrefix(t), ""), Options{Title: "fleet <a>"})
	page := get(t, srv, "/", 200)
	if !strings.Contains(page, "<title>fleet &lt;a&gt;</title>") || strings.Contains(page, "http://") && !strings.Contains(page, "www.w3.org") {
		t.Errorf("page: %s", page)
	}
	for _, p := range []string{"/app.js", "/style.css"} {
		if b := get(t, srv, p, 200); len(b) < 100 {
			t.Errorf("%s: %q", p, b)
		}
	}
	get(t, srv, "/nothing", 404)
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}
