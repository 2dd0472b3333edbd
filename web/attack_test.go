package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// Attacks on the handler from outside: what an attacker puts into lock
// names, labels and values (HTML, script, quotes, new lines, long
// strings), into a link, into another site's page (CSRF), and what
// viewers that vanish or never read, and a Redis that stops, do to it.

// Hostile texts: each, if the page ever took it for HTML, would add an
// element or a handler the check below finds (the page's CSP would also
// stop an inline script from running: the check does not rely on it).
var (
	evilImg    = `<img src=x onerror="window.__pwned='img'">`
	evilScript = `</script><script>window.__pwned='script'</script>`
	evilQuote  = "\"'><svg onload=\"window.__pwned='svg'\"><a href=javascript:alert(1)>x</a>\nsecond line"
	evilLong   = strings.Repeat(`<b onclick="window.__pwned='long'">long</b>`, 500) // 22 KB
	// evilLabel is as long as a label may be (256 bytes)
	evilLabel = strings.Repeat(`<i onclick=1>`, 19)
)

// injectedJS reports what the page has that it should not: a handler set
// by the hostile texts, an element they name, a script besides app.js,
// an attribute starting with "on", a javascript: link.
const injectedJS = `(() => {
  const bad = [];
  if (window.__pwned) bad.push("ran: " + window.__pwned);
  for (const sel of ["img", "b", "a[href^='javascript']", "svg svg", "foreignObject", "iframe", "object", "embed"]) {
    const n = document.querySelectorAll(sel).length;
    if (n) bad.push(n + " × " + sel);
  }
  if (document.scripts.length !== 1) bad.push(document.scripts.length + " scripts");
  for (const e of document.querySelectorAll("*"))
    for (const a of e.attributes)
      if (a.name.startsWith("on")) bad.push(e.tagName + " has " + a.name);
  return bad;
})()`

// checkNotInjected fails the test if the page has anything injectedJS finds.
func checkNotInjected(t *testing.T, tab context.Context) {
	t.Helper()
	bad, err := chromedp.Run(tab, chromedp.Evaluate[[]string](injectedJS))
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("the page took hostile text for markup: %v", bad)
	}
}

// TestAttackHostileTextOnThePage: lock names, hold labels, owner labels
// and an Election's value that carry HTML and script, quotes, new lines
// and 22 KB (a name; a label's longest, 256 bytes), on real Clients: the page stays live, adds no element nor
// handler, and shows each text literally (the title too).
func TestAttackHostileTextOnThePage(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	holder := newClient(t, prefix, evilQuote)
	l1, err := holder.Mutex(evilImg, dlock.WithLabel(evilScript)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Unlock(ctx)
	l2, err := holder.Mutex(evilLong, dlock.WithLabel(evilLabel)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	lead, err := holder.Election(evilScript).Campaign(ctx, evilImg+evilQuote)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	w := newClient(t, prefix, evilImg)
	lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) { return w.Mutex(evilImg).Lock(ctx) })
	waitWaiters(t, holder, dlock.KindMutex, evilImg, 1)

	title := `</title><script>window.__pwned='title'</script>`
	srv, _ := serve(t, holder, Options{Refresh: 200 * time.Millisecond, Title: title, AllowForce: true})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#status[data-status="live"]`),
		chromedp.WaitVisible(`tr.waiter`)); err != nil {
		t.Fatalf("the page: %v", err)
	}
	checkNotInjected(t, tab)
	got, err := chromedp.Run(tab, chromedp.Evaluate[map[string][]string](`({
	  names: Array.from(document.querySelectorAll(".lock .name")).map(e => e.textContent),
	  labels: Array.from(document.querySelectorAll("tr.holder")).map(e => e.dataset.holderLabel),
	  cells: Array.from(document.querySelectorAll("tr.holder td, tr.waiter td")).map(e => e.textContent),
	  states: Array.from(document.querySelectorAll(".lock .state")).map(e => e.textContent),
	  title: [document.title, document.querySelector("h1").textContent],
	})`))
	if err != nil {
		t.Fatal(err)
	}
	has := func(list []string, want string, exact bool) bool {
		for _, s := range list {
			if s == want || !exact && strings.Contains(s, want) {
				return true
			}
		}
		return false
	}
	for _, n := range []string{evilImg, evilLong, evilScript} {
		if !has(got["names"], n, true) {
			t.Errorf("name %.60q… not shown literally among %d names", n, len(got["names"]))
		}
	}
	for _, lb := range []string{evilScript, evilLabel} {
		if !has(got["labels"], lb, true) || !has(got["cells"], lb, true) {
			t.Errorf("label %.60q… not shown literally", lb)
		}
	}
	if !has(got["cells"], evilQuote, false) || !has(got["cells"], evilImg, false) {
		t.Error("the owner labels are not shown literally")
	}
	var want strings.Builder
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(evilImg + evilQuote)
	if !has(got["states"], "leader's value "+strings.TrimSpace(want.String()), false) {
		t.Errorf("the Election's value not shown literally: %q", got["states"])
	}
	if got["title"][0] != title || got["title"][1] != title {
		t.Errorf("title %q, want %q literally", got["title"], title)
	}
	screenshot(t, tab, "attack-hostile-text.png")
}

// hostile rewrites the names and labels of threeCycle's snapshot into
// hostile texts, for the wait-for graph and the deadlock list.
func hostile(s *dlock.Snapshot) *dlock.Snapshot {
	names := map[string]string{"accounts": evilImg, "ledger": evilScript, "invoices": evilLong, "catalog": evilQuote, "slots": evilImg + "2"}
	labels := map[string]string{"billing": evilQuote, "audit": evilImg, "export": evilLong, "report": evilScript}
	ref := func(r *dlock.LockRef) {
		if n, ok := names[r.Name]; ok {
			r.Name = n
		}
	}
	wait := func(w *dlock.Wait) {
		if lb, ok := labels[w.Label]; ok {
			w.Label = lb
		}
		for i := range w.For {
			ref(&w.For[i])
		}
		for i := range w.Holds {
			ref(&w.Holds[i].LockRef)
		}
	}
	for _, l := range s.Locks {
		l.Name = names[l.Name]
		for i := range l.Holders {
			l.Holders[i].Label = labels[l.Holders[i].Label]
		}
	}
	for i := range s.Waits {
		wait(&s.Waits[i])
	}
	for _, ds := range [][]dlock.Deadlock{s.Deadlocks, s.Broken} {
		for _, d := range ds {
			for i := range d.Waits {
				wait(&d.Waits[i])
			}
		}
	}
	return s
}

// TestAttackHostileTextInTheGraph: a deadlock whose locks and waits are
// named by hostile texts (a fake source): the SVG is drawn — every node
// and the red cycle — with no element nor handler added, the names in
// its text and tooltips literally, and the deadlock listed literally.
func TestAttackHostileTextInTheGraph(t *testing.T) {
	c := newClient(t, testPrefix(t), "")
	// a refresh of a second: the view is 0.8 MB (the 22 KB name is in
	// it some thirty times), and the page redraws it each refresh
	srv, _ := serve(t, c, Options{Refresh: time.Second,
		source: func(context.Context, dlock.SnapshotOptions) (*dlock.Snapshot, error) {
			return hostile(threeCycle(time.Now())), nil
		}})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("the page: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`document.querySelectorAll("svg#graph path.edge.cycle").length > 0`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the graph is never drawn: %v", err)
	}
	checkNotInjected(t, tab)
	got, err := chromedp.Run(tab, chromedp.Evaluate[map[string]any](`({
	  cycleEdges: document.querySelectorAll("svg#graph path.edge.cycle").length,
	  nodes: document.querySelectorAll("svg#graph g.node").length,
	  texts: Array.from(document.querySelectorAll("svg#graph g.node > text")).map(e => e.textContent),
	  titles: Array.from(document.querySelectorAll("svg#graph g.node > title")).map(e => e.textContent),
	  graphLocks: Array.from(document.querySelectorAll("svg#graph [data-graph-lock]")).map(e => e.dataset.graphLock),
	  listed: document.querySelector("#deadlocks li").textContent,
	  victim: document.querySelector("#deadlocks .victim-name").textContent,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if got["cycleEdges"] != 6.0 || got["nodes"] != 9.0 {
		t.Errorf("%v red edges and %v nodes, want 6 and 9 (4 waits, 5 locks)", got["cycleEdges"], got["nodes"])
	}
	str := func(k string) string { b, _ := json.Marshal(got[k]); return string(b) }
	for _, want := range []string{evilImg, evilScript, evilLong} {
		q, _ := json.Marshal(want)
		if !strings.Contains(str("graphLocks"), string(q)) {
			t.Errorf("lock %.40q… is not a node's name", want)
		}
	}
	if !strings.Contains(str("texts"), `"mutex \u003cimg src=x onerror=`) {
		t.Errorf("the node labels: %.300s", str("texts"))
	}
	if !strings.Contains(str("titles"), `mutex \"\u003cimg src=x onerror=\\\"window.__pwned='img'\\\"\u003e\"`) {
		t.Errorf("the tooltips: %.400s", str("titles"))
	}
	// the cycle's line is Deadlock.String: the names Go-quoted
	if l := got["listed"].(string); !strings.Contains(l, strconv.Quote(evilImg)) || !strings.Contains(l, strconv.Quote(evilScript)) ||
		got["victim"] != evilLong {
		t.Errorf("the deadlock listed as %.200q, victim %.60q", l, got["victim"])
	}
}

// TestAttackBadFragment: a link whose #filter= is not valid percent
// encoding (sent by someone, or typed) must not stop the page: it goes
// live and shows the locks, the filter box holding the text as it came.
func TestAttackBadFragment(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("orders/%E0").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/#filter=%E0"),
		chromedp.WaitVisible(`#status[data-status="live"]`), chromedp.WaitVisible(`[data-lock="orders/%E0"]`)); err != nil {
		t.Fatalf("a link with #filter=%%E0: the page never went live or never showed the lock: %v", err)
	}
	if v, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("filter").value`)); err != nil || v != "%E0" {
		t.Errorf("the filter box holds %q (%v), want %%E0", v, err)
	}
}

// TestAttackMetricsNames: locks on a real server named with quotes,
// backslashes, new lines, a carriage return, braces and UTF-8, listed
// for metrics: Prometheus's parser reads /metrics back, each name's
// series carries its name exactly, and the raw text escapes as the
// format wants.
func TestAttackMetricsNames(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	names := []string{`say "hi"`, `back\slash\`, "two\nlines", "cr\rhere", `x} 1` + "\n" + `dlock_deadlocks 99`,
		"ünïcödé/锁/🔒", `trailing\`, `{brace="1"}`}
	for _, n := range names {
		l, err := c.Mutex(n).Lock(ctx)
		if err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		defer l.Unlock(ctx)
	}
	srv, _ := serve(t, c, Options{Refresh: 100 * time.Millisecond, MetricNames: names})
	body := get(t, srv, "/metrics", 200)
	fams := parseMetrics(t, body)
	for _, n := range names {
		if v, ok := value(fams, "dlock_lock_held", "kind", "mutex", "name", n); !ok || v != 1 {
			t.Errorf("%q: dlock_lock_held %v (present %v)", n, v, ok)
		}
	}
	if v, _ := value(fams, "dlock_deadlocks"); v != 0 {
		t.Errorf("dlock_deadlocks %v: a name wrote a sample of its own", v)
	}
	if v, _ := value(fams, "dlock_locks_held", "kind", "mutex"); v != float64(len(names)) {
		t.Errorf("dlock_locks_held{mutex} %v, want %d", v, len(names))
	}
	for _, want := range []string{`name="say \"hi\""`, `name="back\\slash\\"`, `name="two\nlines"`, `name="trailing\\"`,
		`name="ünïcödé/锁/🔒"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for i, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "dlock_") {
			t.Errorf("line %d is not a sample: %q", i+1, line)
		}
	}
}

// TestAttackForceCrossSite: with AllowForce on, another site's page — a
// different origin on this machine, in a real browser — cannot free a
// lock: not with a form posted as text/plain that spells the JSON, nor
// with a fetch that sets the page's header (its preflight is never
// granted), nor with a fetch in no-cors mode.
func TestAttackForceCrossSite(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("vault").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	var forces atomic.Int64
	srv, h := serve(t, c, Options{AllowForce: true})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/force" && r.Method == "POST" {
			forces.Add(1)
		}
		h.ServeHTTP(w, r)
	})
	target := srv.URL + "/api/force"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/form":
			fmt.Fprintf(w, `<form id=f method=POST action=%q enctype="text/plain"><input name='{"kind":"mutex","name":"vault","confirm":"vault","x":"' value='"}'></form><script>document.getElementById("f").submit()</script>`, target)
		case "/fetch":
			fmt.Fprintf(w, `<script>
const body = JSON.stringify({kind: "mutex", name: "vault", confirm: "vault"});
const out = [];
fetch(%[1]q, {method: "POST", credentials: "include", headers: {"Content-Type": "application/json", "X-Dlock-Force": "1"}, body})
  .then(r => out.push("cors: HTTP " + r.status), e => out.push("cors: refused"))
  .then(() => fetch(%[1]q, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}))
  .then(r => out.push("no-cors: sent"), e => out.push("no-cors: refused"))
  .then(() => { window.__done = out.join(", "); });
</script>`, target)
		}
	}))
	defer evil.Close()
	tab := browser(t)
	// the form: the browser posts it, and shows the handler's answer
	if err := chromedp.Do(tab, chromedp.Navigate(evil.URL+"/form"), chromedp.WaitReady(`body`)); err != nil {
		t.Fatal(err)
	}
	answer, err := chromedp.Run(tab, chromedp.Poll[string](`location.href.endsWith("/api/force") && document.body && document.body.innerText`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("the form post: %v", err)
	}
	if !strings.Contains(answer, "refused") {
		t.Errorf("the form post was answered %q", answer)
	}
	if !held(t, c, "vault") {
		t.Fatal("another site's form freed the lock")
	}
	if err := chromedp.Do(tab, chromedp.Navigate(evil.URL+"/fetch")); err != nil {
		t.Fatal(err)
	}
	done, err := chromedp.Run(tab, chromedp.Poll[string](`window.__done`, chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("the fetches: %v", err)
	}
	if !strings.Contains(done, "cors: refused") {
		t.Errorf("the cross-origin fetch with the page's header: %s", done)
	}
	if !held(t, c, "vault") {
		t.Fatalf("another site's fetch freed the lock (%s)", done)
	}
	// the form's post and the no-cors one reached the handler; the
	// preflighted one never did
	if n := forces.Load(); n != 2 {
		t.Errorf("%d force requests reached the handler, want 2 (the form's, the no-cors fetch's)", n)
	}
}

// TestAttackNothingFreesWhenReadOnly: with AllowForce off, no method on
// any path, with the page's headers and a confirmed body, frees a lock.
func TestAttackNothingFreesWhenReadOnly(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("stuck").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{})
	body := `{"kind":"mutex","name":"stuck","confirm":"stuck"}`
	for _, method := range []string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		for _, p := range []string{"/api/force", "/api/force?kind=mutex&name=stuck&confirm=stuck", "/api/force/", "/api/snapshot", "/", "/events", "/metrics", "//api/force", "/api/../api/force"} {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			req, _ := http.NewRequestWithContext(rctx, method, srv.URL+p, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(forceHeader, "1")
			req.Header.Set("Origin", srv.URL)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			resp, err := srv.Client().Do(req)
			if err == nil {
				if p != "/events" { // a feed: its headers are its answer
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				}
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(p, "force") && method != "GET" {
					t.Errorf("%s %s: 200", method, p)
				}
			}
			cancel()
			if !held(t, c, "stuck") {
				t.Fatalf("%s %s freed the lock of a read-only page", method, p)
			}
		}
	}
}

// countActive wraps h, counting the requests of path under way.
func countActive(h http.Handler, path string, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			n.Add(1)
			defer n.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}

// TestAttackFeedsThatVanishOrNeverRead: viewers of /events that close
// mid-stream, and one that never reads a byte while 1 MB snapshots pile
// up: each of their requests ends (the one that never reads, by the
// write deadline, while its connection is still open), no goroutine is
// left behind, and a viewer beside them gets every refresh meanwhile.
func TestAttackFeedsThatVanishOrNeverRead(t *testing.T) {
	before := goleak.IgnoreCurrent()
	var gen atomic.Int64
	const interval = 100 * time.Millisecond
	h := New(nil, Options{Refresh: interval, Timeout: 500 * time.Millisecond, Logger: quiet,
		source: func(context.Context, dlock.SnapshotOptions) (*dlock.Snapshot, error) {
			s := threeCycle(time.Now())
			s.Locks[0].Holders[0].Label = fmt.Sprint(gen.Add(1), strings.Repeat("x", 1<<20))
			return s, nil
		}})
	var active atomic.Int64
	srv := httptest.NewServer(countActive(h, "/events", &active))

	// a viewer that reads everything
	ctx, cancel := context.WithCancel(testCtx(t))
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer resp.Body.Close()
		r := bufio.NewReaderSize(resp.Body, 1<<16)
		for {
			line, err := r.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return
			}
			if strings.HasPrefix(string(line), "event: snapshot") {
				seen.Add(1)
			}
		}
	}()
	waitFor(t, 5*time.Second, "the viewer's first event", func() bool { return seen.Load() >= 1 })

	// five that read one event's start and hang up; one that never reads
	raw := func() *net.TCPConn {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		tc := conn.(*net.TCPConn)
		_ = tc.SetReadBuffer(4096)
		if _, err := io.WriteString(tc, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	for range 5 {
		conn := raw()
		b := make([]byte, 4096)
		if _, err := io.ReadAtLeast(conn, b, 1); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	stalled := raw()
	defer stalled.Close()
	waitFor(t, 5*time.Second, "the five that hung up gone, the one that never reads connected", func() bool { return active.Load() == 2 })
	from := seen.Load()
	// the server fills the socket buffers of the one that never reads;
	// its write then times out and its request ends, its connection open
	waitFor(t, 20*time.Second, "the request of the viewer that never reads ended", func() bool { return active.Load() == 1 })
	// meanwhile, and after, the good viewer got the refreshes
	mark := seen.Load()
	waitFor(t, 5*time.Second, "three more events for the good viewer", func() bool { return seen.Load() >= mark+3 })
	t.Logf("the good viewer got %d events while the one that never read stalled", mark-from)
	if mark-from < 1 {
		t.Error("the good viewer got nothing while the other stalled")
	}
	cancel()
	<-readerDone
	waitFor(t, 5*time.Second, "every feed ended", func() bool { return active.Load() == 0 })
	stalled.Close()
	srv.Close()
	srv.Client().CloseIdleConnections()
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left behind: %v", err)
	}
}

// TestAttackRedisStops: the Redis behind the page is killed: the page
// shows the refresh's error beside the last good snapshot, /metrics
// counts the failed refreshes, and once Redis is back (restarted,
// without the old locks) the error goes and the new lock shows.
func TestAttackRedisStops(t *testing.T) {
	rs := redistest.StartT(t, redistest.Options{})
	rdb := rs.Client()
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	l, err := c.Mutex("before").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond, Timeout: 2 * time.Second})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`[data-lock="before"]`)); err != nil {
		t.Fatalf("the page: %v", err)
	}
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(`#error`)); err != nil {
		t.Fatalf("no error shown with Redis down: %v", err)
	}
	text, err := chromedp.Run(tab, textOf(`#error`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "Refresh failed") || !strings.Contains(text, "showing the last good snapshot") {
		t.Errorf("#error says %q", text)
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(`[data-lock="before"]`)); err != nil {
		t.Errorf("the last good snapshot is not shown: %v", err)
	}
	fams := parseMetrics(t, get(t, srv, "/metrics", 200))
	if v, _ := value(fams, "dlock_snapshot_errors_total"); v < 1 {
		t.Errorf("dlock_snapshot_errors_total %v with Redis down", v)
	}
	if err := rs.Restart(false); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx) // lost with the restart
	l2, err := c.Mutex("after").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock(ctx)
	if err := chromedp.Do(tab, chromedp.WaitVisible(`[data-lock="after"]`), chromedp.WaitNotVisible(`#error`)); err != nil {
		t.Fatalf("the page did not recover: %v", err)
	}
	if err := chromedp.Do(tab, chromedp.WaitNotPresent(`[data-lock="before"]`)); err != nil {
		t.Errorf("the lock lost with the restart is still shown: %v", err)
	}
}

// rebindHost is a name the tests' Chromium resolves to 127.0.0.1: an
// attacker's domain after DNS rebinding (its page first loaded from the
// attacker's address, then the name pointed at this machine).
const rebindHost = "rebind.test"

// TestAttackDNSRebinding: a page that listens on loopback, reached under
// an attacker's name that now resolves to 127.0.0.1, is "same origin" to
// the attacker's script: Origin and Sec-Fetch-Site say so, and it may
// set any header. With Options.Hosts (what dlock web sets: the names it
// is reached by) the handler answers such a request 421 and reads or
// frees nothing; by its IP address and as localhost it still works.
func TestAttackDNSRebinding(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("vault").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{AllowForce: true, Hosts: []string{"dlock.internal"}})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	tab := browser(t)
	// the attacker's script, on the page of its (rebound) name: it reads
	// the snapshot and forces the lock as the page itself would
	attack := `(async () => {
	  const out = [];
	  const s = await fetch("/api/snapshot");
	  out.push("snapshot " + s.status);
	  const r = await fetch("/api/force", {method: "POST", headers: {"Content-Type": "application/json", "X-Dlock-Force": "1"},
	    body: JSON.stringify({kind: "mutex", name: "vault", confirm: "vault"})});
	  out.push("force " + r.status);
	  return out.join(", ");
	})()`
	if err := chromedp.Do(tab, chromedp.Navigate("http://"+rebindHost+":"+port+"/")); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](attack, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if got != "snapshot 421, force 421" {
		t.Errorf("under the rebound name: %s, want 421 for both", got)
	}
	if !held(t, c, "vault") {
		t.Fatal("a DNS-rebinding page freed the lock")
	}
	// the names it is reached by still work: its IP, localhost, a listed name
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "dlock.internal", "DLOCK.internal.:80", "[::1]:" + port} {
		req := httptest.NewRequest("GET", "/api/snapshot", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		srv.Config.Handler.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Errorf("Host %s: %d %s", host, rec.Code, rec.Body)
		}
	}
	// without Hosts (the default) the rebound name is refused too; "*"
	// serves any name (a handler inside a service, behind its own checks)
	for _, tc := range []struct {
		hosts []string
		code  int
	}{{nil, http.StatusMisdirectedRequest}, {[]string{"*"}, http.StatusOK}} {
		open, _ := serve(t, c, Options{Hosts: tc.hosts})
		req := httptest.NewRequest("GET", "/api/snapshot", nil)
		req.Host = rebindHost
		rec := httptest.NewRecorder()
		open.Config.Handler.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("Hosts %q, Host %s: %d, want %d", tc.hosts, rebindHost, rec.Code, tc.code)
		}
	}
}

// TestAttackMetricsNamesNotUTF8: two listed names that differ only in
// bytes that are not UTF-8 must not come out as one label set twice
// (Prometheus drops duplicate samples of a scrape): each name's series
// is its own.
func TestAttackMetricsNamesNotUTF8(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	names := []string{"blob-\xff", "blob-\xfe", "blob-\uFFFD"}
	for _, n := range names {
		l, err := c.Mutex(n).Lock(ctx)
		if err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		defer l.Unlock(ctx)
	}
	srv, _ := serve(t, c, Options{Refresh: 100 * time.Millisecond, MetricNames: names})
	fams := parseMetrics(t, get(t, srv, "/metrics", 200))
	seen := map[string]bool{}
	for _, m := range fams["dlock_lock_held"].GetMetric() {
		var key string
		for _, l := range m.GetLabel() {
			key += l.GetName() + "=" + l.GetValue() + ","
		}
		if seen[key] {
			t.Errorf("dlock_lock_held{%s} twice", key)
		}
		seen[key] = true
	}
	if len(seen) != len(names) {
		t.Errorf("%d series of dlock_lock_held for %d names: %v", len(seen), len(names), seen)
	}
}

// TestAttackViewersWhileRedisStalls: Redis stopped (SIGSTOP) for several
// refresh timeouts while twenty pages follow the feed and clients
// hammer /api/snapshot and /metrics: still at most one Snapshot at a
// time, one an interval once each stalled one has failed, every viewer
// told of the failure, and all of them back to fresh snapshots once it
// resumes.
func TestAttackViewersWhileRedisStalls(t *testing.T) {
	rs := redistest.StartT(t, redistest.Options{})
	rdb := rs.Client()
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	var reads, concurrent, most atomic.Int64
	const interval, timeout = 100 * time.Millisecond, 300 * time.Millisecond
	srv, _ := serve(t, c, Options{Refresh: interval, Timeout: timeout, source: func(ctx context.Context, o dlock.SnapshotOptions) (*dlock.Snapshot, error) {
		reads.Add(1)
		n := concurrent.Add(1)
		defer concurrent.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return c.Snapshot(ctx, o)
	}})
	viewCtx, stopViewing := context.WithCancel(ctx)
	defer stopViewing()
	var errorsSeen, okAfter atomic.Int64
	var resumed atomic.Bool
	const pages = 20
	finished := make(chan struct{}, pages+4)
	for range pages {
		req, _ := http.NewRequestWithContext(viewCtx, "GET", srv.URL+"/events", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { finished <- struct{}{} }()
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			told := false
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				var v viewJSON
				if json.Unmarshal([]byte(data), &v) != nil {
					continue
				}
				if v.Error != "" && !told {
					told = true
					errorsSeen.Add(1) // pages told
				} else if v.Error == "" && resumed.Load() {
					okAfter.Add(1)
				}
			}
		}()
	}
	for range 4 {
		go func() {
			defer func() { finished <- struct{}{} }()
			for viewCtx.Err() == nil {
				for _, p := range []string{"/api/snapshot", "/metrics"} {
					req, _ := http.NewRequestWithContext(viewCtx, "GET", srv.URL+p, nil)
					if resp, err := srv.Client().Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
		}()
	}
	readsBefore := reads.Load()
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	waitFor(t, 10*time.Second, "every page told of the failure", func() bool { return errorsSeen.Load() >= pages })
	for time.Since(paused) < 5*timeout {
		time.Sleep(10 * time.Millisecond) // the stall itself is what is measured
	}
	stalledFor := time.Since(paused)
	stalledReads := reads.Load() - readsBefore
	resumed.Store(true)
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every page back to fresh snapshots", func() bool { return okAfter.Load() >= 2*pages })
	stopViewing()
	for range pages + 4 {
		<-finished
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d Snapshots at once, want 1", m)
	}
	// each stalled read lasts a timeout, then the next comes an interval
	// later (one may have begun just before the stall)
	if bound := int64(stalledFor/(timeout+interval)) + 2; stalledReads > bound {
		t.Errorf("%d Snapshots in a %v stall (timeout %v, interval %v): want at most %d", stalledReads, stalledFor, timeout, interval, bound)
	}
	t.Logf("%d Snapshots in a %v stall with %d pages and 4 API clients", stalledReads, stalledFor, pages)
}

// TestAttackForceNameNotUTF8: a lock named with bytes that are not UTF-8
// ("blob-\xff") beside one whose name is what JSON would turn it into
// ("blob-\uFFFD"): the page shows two names, and its force button frees
// the lock of its row, never the other.
func TestAttackForceNameNotUTF8(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	raw, lookalike := "blob-\xff", "blob-\uFFFD"
	for _, n := range []string{raw, lookalike} {
		l, err := c.Mutex(n).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond, AllowForce: true})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#status[data-status="live"]`)); err != nil {
		t.Fatal(err)
	}
	names, err := chromedp.Run(tab, chromedp.Poll[[]string](`(() => { const n = Array.from(document.querySelectorAll(".lock")).map(e => e.dataset.lock); return n.length == 2 && n })()`,
		chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if names[0] == names[1] {
		t.Fatalf("the page shows both locks as %q", names[0])
	}
	q, _ := json.Marshal(strconv.Quote(raw))
	sel := `[data-lock=` + strconv.Quote(strconv.Quote(raw)) + `] button.force`
	js := `window.confirm = () => true; window.alert = (m) => { window.lastAlert = m; };
	  const b = document.querySelector(` + strconv.Quote(sel) + `); b ? (b.click(), true) : false`
	clicked, err := chromedp.Run(tab, chromedp.Evaluate[bool](js))
	if err != nil || !clicked {
		t.Fatalf("no force button for %s among %q (%v)", q, names, err)
	}
	alerted, err := chromedp.Run(tab, chromedp.Poll[string](`window.lastAlert`, chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if held(t, c, raw) {
		t.Errorf("%q still held after its row's force (the page said %q)", raw, alerted)
	}
	if !held(t, c, lookalike) {
		t.Errorf("%q, the other row's lock, was freed (the page said %q)", lookalike, alerted)
	}
}
