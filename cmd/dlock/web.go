package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/web"
)

// webSynopsis is web's usage line.
const webSynopsis = "dlock web [--redis URL] [--tls-*] [--prefix P] [--listen ADDR] [--pattern P] [--limit N] [--refresh 1s] " +
	"[--metrics-names a,b] [--host NAME,...] [--allow-force]"

// defaultListen is where web listens without --listen: this machine
// only (the page shows who holds what; --listen :8080 opens it wider).
const defaultListen = "127.0.0.1:7373"

// webShutdown bounds how long web waits for its requests to end after
// SIGINT or SIGTERM.
const webShutdown = 5 * time.Second

// webCmd is "dlock web": it serves the live page of the locks under the
// prefix, /metrics and /api/snapshot (package web) on --listen until
// SIGINT or SIGTERM, then exits 0.
func webCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a       adminFlags
		listen  string
		opts    web.Options
		metrics []string
		hosts   []string
	)
	fs := newFlags("web")
	a.register(fs)
	fs.StringVar(&listen, "listen", defaultListen, "serve on `ADDR` (host:port; :7373 for every interface)")
	fs.StringVar(&opts.Pattern, "pattern", "", "show only the locks whose name matches `PATTERN` (path.Match syntax)")
	fs.IntVar(&opts.Limit, "limit", 1000, "inspect at most `N` locks a refresh (the page says how many more it found)")
	durationVar(fs, &opts.Refresh, "refresh", "", time.Second, "read the locks every `DURATION` while someone looks (each read SCANs the keyspace)")
	fs.StringSliceVar(&metrics, "metrics-names", nil, "lock `NAMES` (comma separated) that get /metrics series of their own")
	fs.StringSliceVar(&hosts, "host", nil, "host `NAMES` (comma separated) the page is reached by, besides its IP addresses and localhost: "+
		"a proxy's or a DNS name (any other Host is refused, against DNS rebinding; '*' for any)")
	fs.BoolVar(&opts.AllowForce, "allow-force", false, "let the page free a lock whoever holds it, after a confirmation (default: read-only)")
	if code, ok := parseFlags(fs, webSynopsis, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, webSynopsis, "web takes no arguments, got %q", fs.Args())
	}
	if _, err := path.Match(opts.Pattern, ""); err != nil {
		return usageError(stderr, webSynopsis, "--pattern %q: %v", opts.Pattern, err)
	}
	for _, n := range metrics {
		if strings.TrimSpace(n) != "" {
			opts.MetricNames = append(opts.MetricNames, strings.TrimSpace(n))
		}
	}
	// IP addresses and localhost, and the names given (DNS rebinding:
	// web.Options.Hosts)
	for _, h := range hosts {
		if strings.TrimSpace(h) != "" {
			opts.Hosts = append(opts.Hosts, strings.TrimSpace(h))
		}
	}
	opts.Title = fmt.Sprintf("dlock: prefix %q", a.prefix)
	if err := opts.Check(); err != nil {
		return usageError(stderr, webSynopsis, "%v", err)
	}
	t, err := a.options()
	if err != nil {
		return usageError(stderr, webSynopsis, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := connect(ctx, t, a.prefix)
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	defer s.close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		complain(stderr, "web: --listen %s: %v", listen, err)
		return exitFail
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	mode := "read-only"
	if opts.AllowForce {
		mode = "--allow-force: the page can free locks"
	}
	fmt.Fprintf(stdout, "dlock web: the locks under prefix %q on http://%s/ (%s); /metrics, /api/snapshot; Ctrl-C stops\n",
		a.prefix, ln.Addr(), mode)
	if err := serveWeb(ctx, ln, web.New(s.c, opts)); err != nil {
		complain(stderr, "web: %v", err)
		return exitFail
	}
	return exitOK
}

// serveWeb serves h on ln until ctx ends, then stops: the open pages'
// feeds end at once (their requests' context is the server's), the
// other requests get webShutdown to finish.
func serveWeb(ctx context.Context, ln net.Listener, h http.Handler) error {
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	cancelBase() // ends the feeds, which would keep Shutdown waiting
	sctx, cancel := context.WithTimeout(context.Background(), webShutdown)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
