// Package web serves a live page of the locks under a dlock Client's
// prefix, their metrics in the Prometheus text format, and their state as
// JSON: what an operator opens when a fleet stalls on a lock.
//
//	mux.Handle("/dlock/", http.StripPrefix("/dlock", web.New(c, web.Options{})))
//
// The handler answers:
//
//	GET  /              the page: holders, waiters in order, elections and
//	                    their leaders, latches, permits, the wait-for graph
//	                    with any deadlock cycle marked, a filter by name
//	GET  /events        the page's live feed: server-sent events, one
//	                    "snapshot" event (the JSON of /api/snapshot) a refresh
//	GET  /api/snapshot  the current snapshot as JSON
//	GET  /metrics       lock-state metrics, Prometheus text format 0.0.4
//	POST /api/force     free a lock whoever holds it: only with
//	                    Options.AllowForce (403 otherwise)
//
// It answers only requests whose Host is an IP address, localhost, or a
// name in Options.Hosts (DNS rebinding: see Hosts), so a service reached
// by name lists it there.
//
// Its cost on Redis is bounded: one Client.Snapshot per Options.Refresh,
// shared by every open page, API call and scrape, and none at all while
// nobody looks (docs/operating.md, "A live page and metrics").
//
// The package is a module of its own, so that the library's importers
// pay nothing for it.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// Options says what the handler shows and allows. The zero value is
// ready to use: every lock, a refresh a second, read-only.
type Options struct {
	// Pattern keeps the locks whose name matches it (path.Match syntax;
	// "" for all). Waits and deadlocks are shown whatever it is.
	Pattern string
	// Limit is how many locks a refresh inspects at most (0: 1000, as
	// dlock.SnapshotOptions); the page says how many more it found.
	Limit int
	// Refresh is how often a new snapshot is read while someone looks
	// (0: one second; at least 100ms).
	Refresh time.Duration
	// Timeout bounds one refresh (0: 10 seconds) and one forced unlock.
	Timeout time.Duration
	// MetricNames are the lock names that get series of their own in
	// /metrics (with a name label). Only these: every series is a
	// time series kept by Prometheus, and lock names are unbounded.
	MetricNames []string
	// AllowForce lets the page free a lock (Client.ForceUnlock), after a
	// confirmation; false (the default) makes the handler read-only.
	AllowForce bool
	// Hosts guards against DNS rebinding: a page on loopback (or on a
	// private address) reached by an attacker's name, which resolved to
	// the attacker first and to this machine next, is same-origin to the
	// attacker's script, which could then read every snapshot and, with
	// AllowForce, free locks. So a request whose Host header is neither
	// an IP address, nor localhost, nor one of these names
	// (case-insensitive, the port ignored) is answered 421 and does
	// nothing. nil: IP addresses and localhost only. A handler mounted in
	// a service reached by name lists that name; {"*"} answers any Host
	// (a service that checks Host itself, or sits behind a proxy that
	// does).
	Hosts []string
	// Title is the page's title (default "dlock").
	Title string
	// Logger receives the forced unlocks and the failed refreshes (nil:
	// slog.Default()).
	Logger *slog.Logger

	// source replaces the Client's Snapshot (the tests' fake snapshots).
	source func(ctx context.Context, opts dlock.SnapshotOptions) (*dlock.Snapshot, error)
}

// Defaults and bounds of Options.
const (
	defaultRefresh = time.Second
	minRefresh     = 100 * time.Millisecond
	defaultTimeout = 10 * time.Second
	defaultTitle   = "dlock"
	// maxMetricNames bounds MetricNames: four series a name and kind.
	maxMetricNames = 1000
)

// Check reports what is wrong with o, if anything: a bad Pattern, a
// negative Limit, Refresh or Timeout, a Refresh under 100ms, too many
// MetricNames. New serves an error for every request when it fails.
func (o Options) Check() error {
	var errs []error
	if o.Pattern != "" {
		if _, err := path.Match(o.Pattern, ""); err != nil {
			errs = append(errs, fmt.Errorf("pattern %q: %w", o.Pattern, err))
		}
	}
	if o.Limit < 0 {
		errs = append(errs, fmt.Errorf("negative limit %d", o.Limit))
	}
	if o.Refresh != 0 && o.Refresh < minRefresh {
		errs = append(errs, fmt.Errorf("refresh %v: want at least %v (each refresh scans the keyspace)", o.Refresh, minRefresh))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("negative timeout %v", o.Timeout))
	}
	if len(o.MetricNames) > maxMetricNames {
		errs = append(errs, fmt.Errorf("%d metric names: at most %d (each is a time series of its own)", len(o.MetricNames), maxMetricNames))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dlock/web: %w", err)
	}
	return nil
}

// withDefaults fills in the zero fields.
func (o Options) withDefaults() Options {
	if o.Refresh == 0 {
		o.Refresh = defaultRefresh
	}
	if o.Timeout == 0 {
		o.Timeout = defaultTimeout
	}
	if o.Title == "" {
		o.Title = defaultTitle
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

//go:embed page
var pageFS embed.FS

// handler is what New returns.
type handler struct {
	c     *dlock.Client
	opts  Options
	snaps *refresher
	mux   *http.ServeMux
}

// New returns the handler of the page, the API and the metrics of c's
// locks. It starts no goroutine: each Snapshot is read by a request that
// finds the last one older than Refresh, and shared with every other. It
// is safe for concurrent use. It panics if c
// is nil; with Options that fail Check it answers every request with
// 500 and the reason.
func New(c *dlock.Client, opts Options) http.Handler {
	if c == nil && opts.source == nil {
		panic("dlock/web: New: nil Client")
	}
	if err := opts.Check(); err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
	}
	opts = opts.withDefaults()
	read := opts.source
	if read == nil {
		read = c.Snapshot
	}
	h := &handler{c: c, opts: opts}
	snapOpts := dlock.SnapshotOptions{Pattern: opts.Pattern, Limit: opts.Limit}
	h.snaps = newRefresher(opts.Refresh, opts.Timeout, opts.Logger,
		func(ctx context.Context) (*dlock.Snapshot, error) { return read(ctx, snapOpts) },
		h.render)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /app.js", h.asset("page/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /style.css", h.asset("page/style.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /events", h.events)
	mux.HandleFunc("GET /api/snapshot", h.snapshot)
	mux.HandleFunc("GET /metrics", h.metrics)
	mux.HandleFunc("POST /api/force", h.force)
	h.mux = mux
	return h
}

// ServeHTTP answers with the page, the feed, the API or the metrics.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// The page loads nothing from elsewhere, runs no inline script, and
	// is never framed (its force button must not be clicked through
	// another site's frame).
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	if !h.hostAllowed(r.Host) {
		http.Error(w, "dlock/web: this page does not answer to the name "+jsonQuote(r.Host)+
			" (a defence against DNS rebinding; dlock web --host NAME adds a name)", http.StatusMisdirectedRequest)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether a request for host (a Host header) is
// answered: an IP address, localhost or a listed name (Options.Hosts;
// "*": any).
func (h *handler) hostAllowed(host string) bool {
	if hn, _, err := net.SplitHostPort(host); err == nil {
		host = hn
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, n := range h.opts.Hosts {
		if n == "*" || strings.TrimSuffix(strings.ToLower(n), ".") == host {
			return true
		}
	}
	return false
}

// page serves the page, its title filled in.
func (h *handler) page(w http.ResponseWriter, _ *http.Request) {
	b, err := pageFS.ReadFile("page/index.html")
	if err != nil {
		http.Error(w, "dlock/web: the page is missing: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(fillTitle(b, h.opts.Title))
}

// asset serves one embedded file as it is.
func (h *handler) asset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		b, err := pageFS.ReadFile(name)
		if err != nil {
			http.Error(w, "dlock/web: "+name+" is missing: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	}
}

// snapshot serves the current snapshot as JSON: the last refresh's if it
// is fresh (younger than Refresh), else the next one's.
func (h *handler) snapshot(w http.ResponseWriter, r *http.Request) {
	st, err := h.snaps.fresh(r.Context())
	if err != nil {
		http.Error(w, "dlock/web: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(st.view)
}

// events is the page's live feed: a fresh snapshot at once, then one
// each refresh interval, as server-sent events, until the viewer goes
// away (every open feed shares the one read of each interval: refresher.go).
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	var last *state
	_ = h.snaps.follow(r.Context(), func(st *state) error {
		if st == last {
			return nil
		}
		last = st
		_ = rc.SetWriteDeadline(time.Now().Add(h.opts.Timeout))
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", st.view); err != nil {
			return err
		}
		return rc.Flush()
	})
}
