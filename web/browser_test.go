package web

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dlock-go/dlock"
)

// The page in a real browser: Debian's headless Chromium (./test.sh
// installs the chromium package), driven through the DevTools protocol
// with chromedp. With DLOCK_SCREENSHOT=DIR each test also writes a PNG of
// the page into DIR; TestPageThreePartyDeadlock's is deadlock-page.png,
// the picture docs/operating.md shows:
//
//	DLOCK_SCREENSHOT=$PWD/docs go test ./web -run TestPageThreePartyDeadlock

// chromiumNames are the names the browser is installed under.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

// shared is the one Chromium the package's tests share (a tab each):
// started by the first browser test, stopped by TestMain (closeBrowser).
var shared struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab; new tabs are made from it
	cancel func()          // closes the browser and waits for it to exit
	err    error
}

// findChromium returns the browser's path, or "".
func findChromium() string {
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// browser returns a new tab of the package's headless Chromium (started
// at the first call), closed with the test, its calls bounded by a
// minute. It skips the test when no Chromium is installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := findChromium()
	if exe == "" {
		t.Skip("no Chromium found (looked for " + strings.Join(chromiumNames, ", ") + "): the page's browser tests need one; ./test.sh installs Debian's chromium package")
	}
	shared.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(exe),
			chromedp.Flag("headless", true),
			chromedp.DisableGPU,
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(1280, 1000),
			// rebind.test is this machine, as a DNS-rebinding attacker's
			// name would be (TestAttackDNSRebinding)
			chromedp.Flag("host-resolver-rules", "MAP "+rebindHost+" 127.0.0.1"),
		)
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		shared.ctx, shared.cancel = bctx, func() { cancelBrowser(); cancelAlloc() }
		shared.err = chromedp.Do(bctx)
	})
	if shared.err != nil {
		t.Fatalf("starting %s: %v", exe, shared.err)
	}
	tab, cancelTab := chromedp.NewContext(shared.ctx)
	tab, cancelTime := context.WithTimeout(tab, time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab() // closes the tab
	})
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	return tab
}

// closeBrowser stops the shared Chromium, if it was started.
func closeBrowser() {
	if shared.cancel != nil {
		shared.cancel()
	}
}

// screenshot writes the page as DIR/name when DLOCK_SCREENSHOT=DIR.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("DLOCK_SCREENSHOT")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", p)
}

// textOf reads the text of the first element sel finds, in one step of
// the page's script: the page redraws its rows every refresh, so a node
// looked up in one call may be gone by the next.
func textOf(sel string) chromedp.Action[string] {
	q, _ := json.Marshal(sel)
	return chromedp.Evaluate[string](`(() => { const e = document.querySelector(` + string(q) + `); return e ? e.textContent : "" })()`)
}

// TestPageLive: the page shows a holder (its label) within a second of
// its Lock, its waiters in the order they queued, and nothing of the
// lock once it is unlocked and its waiters gone.
func TestPageLive(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "page-holder")
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#status[data-status="live"]`)); err != nil {
		t.Fatalf("opening the page: %v", err)
	}

	lockSel := `[data-lock="orders/42"]`
	l, err := c.Mutex("orders/42", dlock.WithLabel("invoice run")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	holderSel := lockSel + ` tr.holder[data-holder-label="invoice run"]`
	if err := chromedp.Do(tab, chromedp.WaitVisible(holderSel)); err != nil {
		t.Fatalf("waiting for the holder: %v", err)
	}
	if d := time.Since(locked); d > time.Second {
		t.Errorf("the holder appeared %v after the Lock, want within a second", d)
	}
	text, err := chromedp.Run(tab, textOf(holderSel))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "invoice run") || !strings.Contains(text, "page-holder") {
		t.Errorf("holder row %q: want its label and its owner's", text)
	}

	var waits []*waiter
	for i, label := range []string{"first-waiter", "second-waiter"} {
		wc := newClient(t, prefix, label)
		waits = append(waits, lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) { return wc.Mutex("orders/42").Lock(ctx) }))
		waitWaiters(t, c, dlock.KindMutex, "orders/42", i+1)
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(lockSel+` tr.waiter[data-waiter="1"]`)); err != nil {
		t.Fatalf("waiting for two waiters: %v", err)
	}
	order, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('[data-lock="orders/42"] tr.waiter')).map(r => r.dataset.waiter + ":" + r.dataset.ownerLabel)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "0:first-waiter,1:second-waiter" {
		t.Errorf("waiters on the page: %v, want first-waiter then second-waiter", order)
	}
	screenshot(t, tab, "page-live.png")

	// the filter hides what does not match, and shows it again
	if err := chromedp.Do(tab, chromedp.SendKeys(`#filter`, "nothing-like-it"), chromedp.WaitNotPresent(lockSel)); err != nil {
		t.Fatalf("filtering: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`(() => { const f = document.getElementById("filter"); f.value = "ORDERS/"; f.dispatchEvent(new Event("input")); return true })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(lockSel)); err != nil {
		t.Fatalf("filtering on part of the name, in capitals: %v", err)
	}
	// no force button on a read-only page
	if buttons, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('button.force').length`)); err != nil || buttons != 0 {
		t.Errorf("%d force buttons on a read-only page (%v)", buttons, err)
	}

	for _, w := range waits {
		w.stop()
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.WaitNotPresent(lockSel)); err != nil {
		t.Fatalf("waiting for the lock to go: %v", err)
	}
}

// TestPageDrawsADeadlock: given a snapshot with a three-party deadlock
// (a fake source), the page draws the cycle in the wait-for graph —
// six red edges, the victim's node marked and named — lists it, and
// marks each of its locks DEADLOCK; the locks found past the limit are
// counted ("5 more not shown; narrow the filter").
func TestPageDrawsADeadlock(t *testing.T) {
	c := newClient(t, testPrefix(t), "")
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond, Title: "dlock: prefix \"shop\"",
		source: func(context.Context, dlock.SnapshotOptions) (*dlock.Snapshot, error) {
			s := threeCycle(time.Now())
			s.More = 5
			return s, nil
		}})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`svg#graph .edge.cycle`)); err != nil {
		t.Fatalf("the page: %v", err)
	}
	cycleEdges, err1 := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('svg#graph path.edge.cycle').length`))
	markers, err2 := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('.lock [data-deadlock]').length`))
	victim, err3 := chromedp.Run(tab, textOf(`svg#graph g.node.victim`))
	listed, err4 := chromedp.Run(tab, textOf(`#deadlocks li`))
	more, err5 := chromedp.Run(tab, textOf(`#more`))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(more, "5 more not shown; narrow the filter") {
		t.Errorf("#more says %q", more)
	}
	if cycleEdges != 6 {
		t.Errorf("%d red edges, want 6 (three waits, three locks)", cycleEdges)
	}
	if markers != 3 {
		t.Errorf("%d locks marked DEADLOCK, want 3", markers)
	}
	if !strings.Contains(victim, "export") || !strings.Contains(victim, "victim") {
		t.Errorf("victim node %q: want export, named victim", victim)
	}
	if !strings.Contains(listed, "Victim: export gives up") {
		t.Errorf("deadlock listed as %q", listed)
	}
	screenshot(t, tab, "deadlock-page-drawn.png")
}

// TestPageForceButton: with AllowForce the page shows a force button
// on a held lock, asks for confirmation, and frees the lock only when it
// is given.
func TestPageForceButton(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("pinned").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{Refresh: 200 * time.Millisecond, AllowForce: true})
	tab := browser(t)
	btn := `[data-lock="pinned"] button.force`
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(btn)); err != nil {
		t.Fatalf("the page: %v", err)
	}
	// the dialog, declined: nothing happens
	click := func(accept bool) {
		t.Helper()
		js := `window.confirm = () => ` + map[bool]string{true: "true", false: "false"}[accept] +
			`; window.alert = (m) => { window.lastAlert = m; }; document.querySelector(` + "'" + btn + "'" + `).click(); true`
		if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](js)); err != nil {
			t.Fatal(err)
		}
	}
	click(false)
	time.Sleep(300 * time.Millisecond) // nothing to wait for: this checks that nothing happens
	if !held(t, c, "pinned") {
		t.Fatal("freed although the confirmation was declined")
	}
	click(true)
	waitFor(t, 5*time.Second, "freed after the confirmation", func() bool { return !held(t, c, "pinned") })
	alerted, err := chromedp.Run(tab, chromedp.Poll[string](`window.lastAlert`, chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(alerted, "Freed") {
		t.Errorf("the page said %q", alerted)
	}
}

// TestPageThreePartyDeadlock: three services on real Clients, each
// holding one lock and waiting, through its lease's Context, for the
// next one's: the page draws the cycle (while the detector lets it
// stand: its delay) and, once the victim has given up, lists it among
// the deadlocks broken. With DLOCK_SCREENSHOT=DIR it writes
// DIR/deadlock-page.png while the cycle is drawn. It skips when the
// library records no waits (a library without the detector).
func TestPageThreePartyDeadlock(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	names := []string{"accounts", "ledger", "invoices"}
	who := []string{"billing", "audit", "export"}
	var clients []*dlock.Client
	var leases []*dlock.Lease
	for i, n := range names {
		c := newClient(t, prefix, who[i])
		l, err := c.Mutex(n, dlock.WithLabel(who[i])).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		clients, leases = append(clients, c), append(leases, l)
	}
	viewer := clients[0]
	srv, _ := serve(t, viewer, Options{Refresh: 200 * time.Millisecond, Title: "dlock: three services in a deadlock"})
	tab := browser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#status[data-status="live"]`)); err != nil {
		t.Fatal(err)
	}
	var waits []*waiter
	for i := range names {
		c, held, next := clients[i], leases[i], names[(i+1)%len(names)]
		waits = append(waits, lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) {
			return c.Mutex(next, dlock.WithLabel(who[i])).Lock(held.Context(ctx))
		}))
	}
	for i := range names {
		waitWaiters(t, viewer, dlock.KindMutex, names[i], 1)
	}
	recorded := false
	for deadline := time.Now().Add(3 * time.Second); !recorded && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err := viewer.Snapshot(ctx, dlock.SnapshotOptions{})
		recorded = err == nil && (len(s.Waits) > 0 || len(s.Broken) > 0)
	}
	if !recorded {
		t.Skip("the library records no waits (no deadlock detector): nothing to draw")
	}
	cycleErr := chromedp.Do(tab, chromedp.WaitVisible(`svg#graph .edge.cycle`))
	if cycleErr == nil {
		screenshot(t, tab, "deadlock-page.png")
	}
	if err := chromedp.Do(tab, chromedp.WaitVisible(`#broken li`)); err != nil {
		t.Fatalf("the broken deadlock is not listed (%v); the cycle was drawn: %v", err, cycleErr == nil)
	}
	if cycleErr != nil {
		t.Errorf("the cycle was never drawn: %v", cycleErr)
	}
	gaveUp := 0
	for _, w := range waits {
		select {
		case <-w.done:
			if errors.Is(w.err, dlock.ErrDeadlock) {
				gaveUp++
			}
		default:
		}
	}
	if gaveUp != 1 {
		t.Errorf("%d of the three waits gave up with ErrDeadlock by the time the page listed it, want 1", gaveUp)
	}
}
