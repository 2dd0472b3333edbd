package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// runSynopsis is run's usage line.
const runSynopsis = "dlock run [--redis URL] [--tls-*] [--prefix P] [--ttl 30s] [--grace 5s] " +
	"[-n | -w SECONDS] [--max-hold D] [-s | -x | --permits N | --value V] [-E 75] [--lost-exit-code 76] [--json] [--quiet] [--eviction-risk] " +
	"NAME [-- CMD [ARGS...] | -c 'CMD']"

// runNotes follow run's flags in "dlock run -h".
const runNotes = `
Flags go before or after NAME; "--" between NAME and CMD is required
(or -c 'CMD', run by /bin/sh -c). Without CMD, run holds the lock until
SIGINT or SIGTERM: it prints "NAME fence=N ttl=D" on stdout once it holds
it, renews it meanwhile, releases it at the signal and exits 0.
--json writes one JSON event a line to stderr (see docs/cli.md).
--redis defaults to $DLOCK_REDIS_URL, else ` + defaultRedisURL + `. URL is one of
` + urlForms + `
exit status:
  CMD's       CMD's own, 128+n if signal n ended it
  1           a Redis error
  76          the lease was lost, or --max-hold ran out, while CMD ran
              (CMD was stopped); --lost-exit-code changes it
  2           bad command line (nothing locked, Redis not contacted)
  75          the lock stayed busy (-n, --wait), or another led all --wait
              long (--value); --conflict-exit-code changes it
  126, 127    CMD could not be started, was not found
  128+n       signal n came before CMD was started

CMD runs in a process group of its own. Lease lost: SIGTERM to the group,
SIGKILL after --grace. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
are passed on to the group; the first four also end run once CMD has
exited. When CMD exits, what it left in its group is killed; if run dies,
even by SIGKILL, the whole group is killed at once.

--value V: instead of the lock NAME, lead the election NAME with value V
(what "dlock leader NAME" shows): run campaigns (candidates are served in
arrival order; -n does not apply, --wait does), runs CMD while it leads,
with DLOCK_FENCE its term, stops CMD as above if the leadership is lost,
and resigns when CMD has exited.

--max-hold D: D after run took the lock, CMD's group gets SIGTERM, and
SIGKILL after --grace; the lock is released only once CMD has exited and
its group was killed, never while CMD runs. In Redis the lock carries a
max hold of D + --grace + 1s, so that it is free by then even if run
cannot release it (run paused, or cut off from Redis).
`

// Exit statuses of run besides the child's own.
const (
	exitBusy      = 75  // EX_TEMPFAIL: the lock was busy (-n) or --wait ran out; --conflict-exit-code changes it
	exitLost      = 76  // the lease was lost (or --max-hold ran out) while CMD ran; --lost-exit-code changes it
	exitCannotRun = 126 // the command could not be started
	exitNotFound  = 127 // the command was not found
	// childWaitDelay bounds how long run waits, after the command's
	// process group was killed, for a process that left the group to close
	// the output it inherited.
	childWaitDelay = time.Second
)

// runConfig is run's command line.
type runConfig struct {
	target       target // where the lock is: --redis, $DLOCK_REDIS_URL, --tls-*
	prefix, name string
	ttl, grace   time.Duration
	wait         waitFlag // --wait; unset: wait as long as it takes
	noWait       bool     // -n, --no-wait: one try
	conflictCode int      // exit status when the lock stays busy
	quiet        bool
	json         bool          // --json: events as JSON lines on stderr
	shell        string        // -c: the command for /bin/sh -c
	value        string        // --value: the leader's value, when elect
	label        string        // --label: dlock.WithLabel, kept with the hold
	elect        bool          // --value given: lead the election NAME, not lock the Mutex
	evictionRisk bool          // --eviction-risk: dlock.WithEvictionRisk
	shared       bool          // --shared: the read side of the RWMutex NAME
	exclusive    bool          // --exclusive: its write side
	permits      int           // --permits N: a permit of the Semaphore NAME of N
	maxHold      time.Duration // --max-hold: CMD is stopped this long after the lock was taken; 0: never
	stopAt       time.Time     // with --max-hold: when CMD gets SIGTERM (set once the lock is taken)
	lostCode     int           // exit status when the lease was lost while CMD ran
	argv         []string      // CMD; none: hold the lock until a signal
}

// runCmd is "dlock run": it takes the lock NAME, runs CMD with DLOCK_NAME
// and DLOCK_FENCE in its environment, and releases the lock when CMD has
// exited. The command line is
//
//	dlock run [flags] NAME -- CMD [ARGS...]
//
// Flags go before or after NAME, and "--" between NAME and CMD is
// required: any other word between them is refused with status 2 before
// Redis is contacted, so that "dlock run job x" cannot take the lock and
// run something else than meant.
//
// Waiting: by default run waits for the lock as long as it takes; --wait D
// gives up after D, -n (--no-wait) after one try; both then exit with
// --conflict-exit-code (75, EX_TEMPFAIL, unless changed). A SIGINT,
// SIGTERM, SIGHUP or SIGQUIT ends the wait (status 128+n).
//
// CMD runs in a process group of its own, led by a guard process, so that
// every signal reaches CMD and everything it started (see group_unix.go):
// if the lease is lost, the group gets SIGTERM, then SIGKILL after --grace;
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to run are
// passed on to the group, and the first four also make run exit once CMD
// has (SIGKILL for the group if that takes longer than --grace, or at once
// on a second one). When CMD exits, what it left behind in its group is
// killed before the lock is released. If run itself dies, even by
// SIGKILL, the guard kills the group at once; the lock stays taken until
// its TTL runs out.
//
// With --value V, run leads the election NAME instead (see runhold.go):
// it campaigns with the value V, runs CMD while it leads (DLOCK_FENCE is
// its term), treats a lost leadership as a lost lease, and resigns once
// CMD has exited. -n is refused then: a candidate has no single try.
//
// The exit status is CMD's (128+n if signal n ended it); 1 if the lease
// was lost and CMD's status was 0; 1 for Redis errors; 2 for a bad command
// line; 75 (--conflict-exit-code) if the lock stayed busy (or another led
// all --wait long); 126 if CMD could not be started, 127 if it was not
// found; 128+n if signal n came before CMD was started.
func runCmd(args []string, stdout, stderr io.Writer) int {
	// run must not die of a signal that it passes on (SIGHUP above all):
	// catch them before anything else happens.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, groupSignals...)
	defer signal.Stop(sigs)

	c, code, ok := parseRun(args, os.Getenv, stdout, stderr)
	if !ok {
		return code
	}
	if err := runSupported(); err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	return c.run(sigs, stdout, stderr)
}

// parseRun parses run's command line, reading $DLOCK_REDIS_URL with
// getenv. It returns ok false and the exit status when run must not go on:
// 0 after -h, 2 for a bad command line. It contacts no server.
func parseRun(args []string, getenv func(string) string, stdout, stderr io.Writer) (c runConfig, code int, ok bool) {
	var conn connFlags
	fs := newFlags("run")
	conn.register(fs)
	fs.StringVar(&c.prefix, "prefix", dlock.DefaultPrefix, "key `prefix` of the lock")
	durationVar(fs, &c.ttl, "ttl", "", dlock.DefaultTTL, "lease time to live, renewed every ttl/3 while run holds the lock")
	durationVar(fs, &c.grace, "grace", "", 5*time.Second, "after SIGTERM, how long CMD may take before SIGKILL")
	fs.BoolVarP(&c.noWait, "no-wait", "n", false, "try once; if the lock is busy, exit at once with --conflict-exit-code")
	fs.VarP(&c.wait, "wait", "w", "give up after waiting `SECONDS` for the lock (10, 1.5, or with a unit: 10s, 5m; exit status: --conflict-exit-code); default: wait as long as it takes")
	fs.IntVarP(&c.conflictCode, "conflict-exit-code", "E", exitBusy, "exit `status` when the lock stays busy (-n, --wait)")
	fs.BoolVarP(&c.shared, "shared", "s", false, "take the read side of the RWMutex NAME (with others --shared at once; as flock -s)")
	fs.BoolVarP(&c.exclusive, "exclusive", "x", false, "take the write side of the RWMutex NAME (alone: no --shared holder either; as flock -x)")
	fs.StringVarP(&c.shell, "command", "c", "", "run `CMD` through /bin/sh -c (as flock -c), instead of \"-- CMD [ARGS...]\"")
	fs.BoolVar(&c.json, "json", false, "write what happens to stderr as JSON, one event a line (waiting, acquired, renewed, lost, released, exit...)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only errors (not the waiting and holding notes)")
	fs.StringVar(&c.label, "label", "", "keep `TEXT` with the hold (at most 256 bytes): inspect, ls and top show it, and a run refused the lock names it")
	fs.StringVar(&c.value, "value", "", "lead the election NAME with `VALUE` (shown by dlock leader) instead of locking the lock NAME")
	fs.IntVar(&c.permits, "permits", 0, "take one of `N` permits of the Semaphore NAME (N holders at once)")
	durationVar(fs, &c.maxHold, "max-hold", "", 0, "stop CMD `DURATION` after the lock was taken (SIGTERM, SIGKILL after --grace); the lock is held until CMD is gone, and at most DURATION + --grace + 1s")
	fs.IntVar(&c.lostCode, "lost-exit-code", exitLost, "exit `status` when the lease was lost (or --max-hold ran out) while run held it")
	fs.BoolVar(&c.evictionRisk, "eviction-risk", false, "run on a server whose maxmemory-policy may evict keys (an evicted lock lets a second owner in)")
	if code, ok := parseFlags(fs, runSynopsis, args, stdout, stderr); !ok {
		if code == exitOK {
			fmt.Fprint(stdout, runNotes)
		}
		return c, code, false
	}
	c.elect = fs.Changed("value")
	bad := func(format string, a ...any) (runConfig, int, bool) {
		return c, usageError(stderr, runSynopsis, format, a...), false
	}
	// NAME, then CMD after a "--": "run NAME -- CMD", "run -c CMD NAME",
	// "run NAME" (hold until a signal), "run -- -NAME -- CMD" (a name
	// that starts with '-').
	words, cmd, dashed := fs.Args(), []string(nil), false
	if n := fs.ArgsLenAtDash(); n >= 0 {
		words, cmd, dashed = words[:n], words[n:], true
	}
	if dashed && len(words) == 0 {
		i := slices.Index(cmd, "--")
		if i < 0 {
			return bad("missing the lock NAME before \"--\"")
		}
		words, cmd = cmd[:i], cmd[i+1:]
	}
	switch {
	case len(words) == 0:
		return bad("missing the lock NAME")
	case words[0] == "":
		return bad("empty lock NAME")
	case len(words) > 1:
		return bad("%q after the lock NAME %q: want \"--\" between NAME and the command (or -c 'CMD')", words[1], words[0])
	}
	c.name = words[0]
	switch {
	case fs.Changed("command") && dashed:
		return bad("-c CMD and \"-- CMD\": give one of them")
	case fs.Changed("command") && strings.TrimSpace(c.shell) == "":
		return bad("-c: empty command")
	case fs.Changed("command"):
		c.argv = []string{shellPath, "-c", c.shell}
	case dashed && len(cmd) == 0:
		return bad("missing the command to run after \"--\" (without \"--\", run holds the lock until SIGINT or SIGTERM)")
	default:
		c.argv = cmd // none: hold until a signal
	}
	switch {
	case c.ttl < 10*time.Millisecond:
		return bad("--ttl %v: want at least 10ms", c.ttl)
	case c.grace < 0:
		return bad("--grace %v: must not be negative", c.grace)
	case c.noWait && c.wait.set:
		return bad("-n and --wait: give one of them")
	case c.elect && (c.noWait || c.wait.set && c.wait.d == 0):
		return bad("--value campaigns in an election, where a candidate has no single try: -n and --wait 0 do not apply")
	case len(c.label) > dlock.MaxLabel:
		return bad("--label: %d bytes, want at most %d", len(c.label), dlock.MaxLabel)
	case c.conflictCode < 0 || c.conflictCode > 255:
		return bad("--conflict-exit-code %d: want 0 to 255", c.conflictCode)
	case c.lostCode < 0 || c.lostCode > 255:
		return bad("--lost-exit-code %d: want 0 to 255", c.lostCode)
	case c.maxHold < 0 || c.maxHold > 0 && c.maxHold < time.Millisecond:
		return bad("--max-hold %v: want at least 1ms", c.maxHold)
	case c.permits < 0 || c.permits > dlock.MaxPermits:
		return bad("--permits %d: want 1 to 2^52", c.permits)
	case btoi(c.shared)+btoi(c.exclusive)+btoi(c.permits > 0)+btoi(c.elect) > 1:
		return bad("--shared, --exclusive, --permits and --value: give one of them")
	}
	if c.wait.set && c.wait.d == 0 {
		c.noWait = true // --wait 0 is one try, as in flock
	}
	if err := checkPrefix(c.prefix); err != nil {
		return bad("%v", err)
	}
	t, err := conn.options(getenv)
	if err != nil {
		return bad("%v", err)
	}
	c.target = t
	return c, exitOK, true
}

// shellPath is the shell that runs -c's command, as flock's does.
const shellPath = "/bin/sh"

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitFlag is the value of --wait: a duration that is either set or not.
type waitFlag struct {
	d   time.Duration
	set bool
}

// String returns the duration, or "" when not set (so that no default is
// shown).
func (w *waitFlag) String() string {
	if w == nil || !w.set {
		return ""
	}
	return w.d.String()
}

// Type names the kind of value for -h.
func (w *waitFlag) Type() string { return "seconds" }

// errWait says what --wait takes.
var errWait = errors.New("not a time to wait: give seconds (10, 1.5) or a duration with a unit (10s, 300ms, 5m)")

// Set parses seconds as flock's -w takes them (10, 1.5), or a Go
// duration with its unit (10s, 300ms, 1m30s); zero or more.
func (w *waitFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil && plainSeconds(s) {
		secs, perr := strconv.ParseFloat(s, 64)
		if perr != nil || secs*float64(time.Second) > math.MaxInt64 {
			return fmt.Errorf("%s seconds: too long", s)
		}
		d, err = time.Duration(math.Round(secs*float64(time.Second))), nil
	}
	switch {
	case err != nil:
		return errWait
	case d < 0:
		return fmt.Errorf("%v: must not be negative", d)
	}
	w.d, w.set = d, true
	return nil
}

// plainSeconds reports whether s is a number of seconds as flock writes
// them: digits, with a decimal point at most (no sign, exponent or unit).
func plainSeconds(s string) bool {
	digits, point := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			point++
		default:
			return false
		}
	}
	return digits > 0 && point <= 1
}

// run holds the lock, or leads the election (--value), around the child,
// or without one until a stopping signal (hold). sigs delivers the
// signals that end a wait or are passed on to the child.
func (c runConfig) run(sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	r := &reporter{w: stderr, json: c.json, quiet: c.quiet, name: c.name}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Until the child runs, a stopping signal cancels what is in progress;
	// SIGUSR1 and SIGUSR2 are dropped, there is no one to pass them to.
	// The signal is handed over by closing watchDone.
	var sig os.Signal
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case s := <-sigs:
				if stops(s) {
					sig = s
					cancel()
					return
				}
			case <-stopWatch:
				return
			}
		}
	}()
	interrupted := func() os.Signal {
		close(stopWatch)
		<-watchDone
		return sig
	}

	rdb, _, err := dial(ctx, c.target)
	if err != nil {
		if s := interrupted(); s != nil {
			r.tell(false, "", eventSignal, "signal", sigName(s))
			return signalStatus(s)
		}
		r.fail("%v", err)
		return exitFail
	}
	defer rdb.Close()
	opts := []dlock.Option{dlock.WithPrefix(c.prefix)}
	if c.evictionRisk {
		opts = append(opts, dlock.WithEvictionRisk())
	}
	var renewals chan struct{}
	if c.json {
		// the renewed events: the watchdog's renewals counter pings
		renewals = make(chan struct{}, 1)
		opts = append(opts, dlock.WithMeterProvider(renewalMeter{ping: renewals}))
	}
	client, err := dlock.New(rdb, opts...)
	if err != nil {
		interrupted()
		r.fail("%v", err)
		return exitFail
	}
	defer client.Close()

	h, err := c.take(ctx, client, r)
	if s := interrupted(); s != nil {
		if err == nil {
			_ = release(h)
		}
		r.tell(false, fmt.Sprintf("%v: gave up waiting for %s", s, c.what()), eventSignal, "signal", sigName(s))
		return signalStatus(s)
	}
	switch {
	case errors.Is(err, dlock.ErrNotObtained) && c.noWait:
		r.tell(false, fmt.Sprintf("lock %q is held by %s (-n: not waiting)", c.name, busyHolder(err)), eventConflict, "status", c.conflictCode, "holder", busyHolderJSON(err))
		return c.conflictCode
	case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.DeadlineExceeded):
		r.tell(false, fmt.Sprintf("gave up waiting for %s after %v (--wait): held by %s", c.what(), c.wait.d, busyHolder(err)), eventConflict, "status", c.conflictCode, "holder", busyHolderJSON(err))
		return c.conflictCode
	case errors.Is(err, dlock.ErrEvictionPolicy):
		r.fail("%v\n(dlock run --eviction-risk accepts the risk; better: CONFIG SET maxmemory-policy noeviction)", err)
		return exitFail
	case err != nil:
		r.fail("%v", err)
		return exitFail
	}
	if c.maxHold > 0 {
		// From now: the lease began before, so CMD is stopped, and gone,
		// before the lock's max hold (maxHoldLock) counted from then.
		c.stopAt = time.Now().Add(c.maxHold)
	}
	stopRenewals := func() {}
	if renewals != nil {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			reportRenewals(rctx, h, renewals, r)
		}()
		stopRenewals = func() { stop(); <-done }
	}
	var code int
	if len(c.argv) == 0 {
		r.tell(true, c.heldNote(h)+", until SIGINT or SIGTERM", eventAcquired, "fence", h.Fence(), "ttl_ms", c.ttl.Milliseconds())
		fmt.Fprintln(stdout, c.heldLine(h))
		code = c.hold(h, sigs, r)
	} else {
		r.tell(true, fmt.Sprintf("%s; running %s", c.heldNote(h), quoteArgs(c.argv)), eventAcquired, "fence", h.Fence(), "ttl_ms", c.ttl.Milliseconds())
		code = c.runChild(h, sigs, stdout, stderr, r)
	}
	stopRenewals() // no renewed event after exit, signal or lost
	switch err := release(h); {
	case err == nil:
		r.tell(false, "", eventReleased, "fence", h.Fence())
	case !errors.Is(err, dlock.ErrNotHeld):
		r.fail("%v", err)
		if code == exitOK {
			code = exitFail
		}
	}
	return code
}

// hold is run without CMD: it keeps h (renewed by the library's
// watchdog) until a stopping signal comes, and returns 0 then; or until
// the lease is lost or --max-hold runs out, and returns --lost-exit-code.
// The caller releases h.
func (c runConfig) hold(h holding, sigs <-chan os.Signal, r *reporter) int {
	var maxHoldC <-chan time.Time
	if !c.stopAt.IsZero() {
		t := time.NewTimer(time.Until(c.stopAt))
		defer t.Stop()
		maxHoldC = t.C
	}
	for {
		select {
		case s := <-sigs:
			if stops(s) {
				r.tell(true, fmt.Sprintf("%v: releasing %s", s, c.what()), eventSignal, "signal", sigName(s))
				return exitOK
			}
		case <-h.Done():
			r.tell(false, fmt.Sprintf("%v: exit status %d (--lost-exit-code)", h.Err(), c.lostCode), eventLost, "error", errText(h.Err()))
			return c.lostCode
		case <-maxHoldC:
			r.tell(false, fmt.Sprintf("the max hold (--max-hold %v) ran out; releasing %s: exit status %d (--lost-exit-code)", c.maxHold, c.what(), c.lostCode),
				eventMaxHold, "max_hold_ms", c.maxHold.Milliseconds())
			return c.lostCode
		}
	}
}

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startErrorStatus is the status for a command that could not be
// started: 127 if it was not found, 126 otherwise (as the shell does).
func startErrorStatus(err error) int {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
		return exitNotFound
	}
	return exitCannotRun
}

// signalStatus is the exit status for a process ended by sig: 128+n.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFail
}

// quoteArgs renders argv for a message, quoting the words that need it.
func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?;&|<>(){}") {
			q[i] = strconv.Quote(a)
		}
	}
	return strings.Join(q, " ")
}
