package dlock_test

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// recorder is a go-redis hook that records every command a client sends:
// single commands, and each pipeline as one round trip.
type recorder struct {
	mu    sync.Mutex
	calls [][]string // one entry per round trip: the command names in it
	words int        // the words of the commands recorded at the driver seam (addCommands)
	// scriptWords are those of its script calls (EVALSHA, EVAL) alone
	scriptWords int
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(cmds)
		return next(ctx, cmds)
	}
}

func (r *recorder) add(cmds []redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	r.addNames(names)
}

// addNames records one round trip of the commands named.
func (r *recorder) addNames(all []string) {
	var names []string
	for _, n := range all {
		switch n := strings.ToLower(n); n {
		case "hello", "client", "auth", "select", "ping":
			// connection set-up and health checks, not lock traffic
		default:
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, names)
	r.mu.Unlock()
}

// take returns the round trips recorded since the last take.
func (r *recorder) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

// countedClient returns a dlock Client whose Redis traffic rec records at
// the driver seam: go-redis's (on the Client's own connections), or
// DLOCK_TEST_DRIVER's.
func countedClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *recorder) {
	rec := &recorder{}
	c := seamClient(t, func(d driver.Driver) driver.Driver { return countedDriver{d, rec} }, opts...)
	return c, rec
}

// countedThroughClient returns a dlock Client that sends its commands
// through a go-redis client (WithoutOwnConnections), whose hook rec is:
// what the Client's own batching (internal/transport) sends.
func countedThroughClient(t *testing.T) (*dlock.Client, *recorder) {
	rdb := newRedis(t, srv)
	rec := &recorder{}
	rdb.AddHook(rec)
	c, err := dlock.New(rdb, dlock.WithoutOwnConnections())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

// countedDriver records what a driver sends as the go-redis hook does:
// each Do and each Pipeline (also on a dedicated connection) is a round
// trip.
type countedDriver struct {
	driver.Driver
	rec *recorder
}

func (d countedDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	d.rec.addCommands([]driver.Command{c})
	return d.Driver.Do(ctx, c)
}

func (d countedDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	d.rec.addCommands(cmds)
	return d.Driver.Pipeline(ctx, cmds)
}

func (d countedDriver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	return d.Driver.Dedicated(ctx, key, func(c driver.Conn) error { return fn(countedConn{c, d.rec}) })
}

func (d countedDriver) Masters(ctx context.Context) ([]driver.Driver, error) {
	ms, err := d.Driver.Masters(ctx)
	for i, m := range ms {
		ms[i] = countedDriver{m, d.rec}
	}
	return ms, err
}

type countedConn struct {
	driver.Conn
	rec *recorder
}

func (c countedConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	c.rec.addCommands(cmds)
	return c.Conn.Pipeline(ctx, cmds)
}

// addCommands records one round trip of driver commands.
func (r *recorder) addCommands(cmds []driver.Command) {
	names, words, scriptWords := make([]string, len(cmds)), 0, 0
	for i, c := range cmds {
		names[i] = c.StringArgs()[0]
		words += len(c.Args)
		if n := strings.ToLower(names[i]); n == "evalsha" || n == "eval" {
			scriptWords += len(c.Args)
		}
	}
	r.mu.Lock()
	r.words += words
	r.scriptWords += scriptWords
	r.mu.Unlock()
	r.addNames(names)
}

// takeScriptWords returns the words of the script calls recorded since
// the last takeScriptWords.
func (r *recorder) takeScriptWords() int { return r.takeCount(&r.scriptWords) }

// takeWords returns the words recorded since the last takeWords.
func (r *recorder) takeWords() int { return r.takeCount(&r.words) }

// takeCount returns *n, a count of r's, and sets it to zero.
func (r *recorder) takeCount(n *int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := *n
	*n = 0
	return v
}

func TestUncontendedIsOneRoundTripEach(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t)
	m := c.Mutex(lockName(t))
	unlock(t, mustLock(t, m, ctx)) // loads the scripts
	rec.take()

	l := mustLock(t, m, ctx)
	if calls := rec.take(); len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "evalsha" {
		t.Fatalf("uncontended Lock sent %v; want exactly one evalsha", calls)
	}
	unlock(t, l)
	if calls := rec.take(); len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "evalsha" {
		t.Fatalf("Unlock sent %v; want exactly one evalsha", calls)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, l)
	if calls := rec.take(); len(calls) != 2 {
		t.Fatalf("TryLock+Unlock sent %v; want two round trips", calls)
	}
}

// An uncontended Lock and its Unlock send their fast scripts, with only
// the keys and arguments those read (internal/protocol/script.go, "Fast
// scripts"): the server pays for every word of a script call, read or not
// (bench/README, "the server's work counted in instructions"). lock.lua
// and unlock.lua would take 17 words each (EVALSHA, the SHA, the number of
// keys, 5 keys, 9 arguments).
func TestUncontendedSendsTheCommonCaseOnly(t *testing.T) {
	ctx := context.Background()
	for _, fair := range []bool{false, true} {
		c, rec := countedClient(t)
		var m dlock.Locker = c.Mutex(lockName(t))
		want := 3 + 3 + 3 // EVALSHA, SHA, 3: the lock, the fence counter, the dead set; token, TTL, the Client's stamp
		if fair {
			m = c.FairMutex(lockName(t) + "-fair")
			want++ // and its queue, which must be empty
		}
		unlock(t, mustLock(t, m, ctx)) // loads the scripts
		rec.take()
		rec.takeWords()
		l := mustLock(t, m, ctx)
		if got := rec.takeWords(); got != want {
			t.Errorf("fair %v: an uncontended Lock sent %d words (%v); want %d", fair, got, rec.take(), want)
		}
		unlock(t, l)
		// EVALSHA, SHA, 4: the lock, the fence counter, the queue, the dead set; token, fence
		if got, want := rec.takeWords(), 3+4+2; got != want {
			t.Errorf("fair %v: its Unlock sent %d words (%v); want %d", fair, got, rec.take(), want)
		}
	}
	// An Election's Campaign and Resign: a FairMutex's (with its stamp), and the value in the hold's tail, the
	// observers' channel and the publish command; Resign's receipt TTL.
	// (lock.lua's and unlock.lua's would be 20 and 17.)
	c, rec := countedClient(t)
	e := c.Election(lockName(t))
	ld := campaign(t, e, "warm-up") // loads the scripts (and leaves a receipt: the next Campaign finds the dead set)
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()
	rec.takeWords()
	ld = campaign(t, e, "v")
	if got, want := rec.takeWords(), 3+4+6; got != want {
		t.Errorf("an uncontended Campaign sent %d words (%v); want %d", got, rec.take(), want)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.takeWords(), 3+4+5; got != want {
		t.Errorf("its Resign sent %d words (%v); want %d", got, rec.take(), want)
	}
}

func TestWatchdogRenewsInOnePipelinePerTick(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t)
	const n, ttl = 8, renewTTL
	var leases []*dlock.Lease
	for i := range n {
		leases = append(leases, mustLock(t, c.Mutex(lockName(t)+string(rune('a'+i))), ctx, dlock.WithTTL(ttl)))
	}
	rec.take()
	rec.takeWords()
	time.Sleep(3 * ttl) // let a few ticks pass; counts are checked, not timing
	calls := rec.take()
	words := rec.takeWords()
	if len(calls) < 3 {
		t.Fatalf("%d renewal round trips in 3 TTLs; want at least 3 (one per TTL/3 tick)", len(calls))
	}
	// Off a cluster the renewals of a tick are one script call
	// (internal/backend, foldRenewals): EVALSHA, its SHA, the number of
	// keys, then each lease's key and four arguments.
	for _, call := range calls {
		if len(call) != 1 {
			t.Fatalf("a renewal round trip carried %d commands %v; want all %d leases in one script call", len(call), call, n)
		}
	}
	if want := len(calls) * (3 + 5*n); words != want {
		t.Fatalf("%d renewal round trips sent %d words; want %d (each the renewals of all %d leases)", len(calls), words, want, n)
	}
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost: %v", err)
		}
		unlock(t, l)
	}
}

func TestNoScriptAfterFlush(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	admin := newRedis(t, srv)
	m := c.Mutex(lockName(t))
	unlock(t, mustLock(t, m, ctx))

	// A single call after SCRIPT FLUSH falls back to EVAL.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const ttl = renewTTL
	l := mustLock(t, m, ctx, dlock.WithTTL(ttl))

	// Pipelined renewals after SCRIPT FLUSH fall back too: the lease
	// survives several renewals with the cache flushed before each.
	for range 4 {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 2)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost across SCRIPT FLUSH: %v", err)
	}
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	unlock(t, l)
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	closed, err := dlock.New(newRedis(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	var nilCtx context.Context
	var nilMutex *dlock.Mutex
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"nil redis", func() error { _, err := dlock.New(nil); return err }, dlock.ErrInvalidArgument},
		{"empty prefix", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithPrefix("")); return err }, dlock.ErrInvalidArgument},
		{"brace in prefix", func() error { _, err := dlock.New(newRedis(t, srv), dlock.WithPrefix("a{b")); return err }, dlock.ErrInvalidArgument},
		{"empty name", func() error { _, err := c.Mutex("").Lock(ctx); return err }, dlock.ErrInvalidArgument},
		{"empty name try", func() error { _, err := c.Mutex("").TryLock(ctx); return err }, dlock.ErrInvalidArgument},
		{"nil mutex", func() error { _, err := nilMutex.Lock(ctx); return err }, dlock.ErrInvalidArgument},
		{"zero ttl", func() error { _, err := c.Mutex("x").Lock(ctx, dlock.WithTTL(0)); return err }, dlock.ErrInvalidArgument},
		{"negative ttl", func() error { _, err := c.Mutex("x").Lock(ctx, dlock.WithTTL(-time.Second)); return err }, dlock.ErrInvalidArgument},
		{"sub-ms ttl", func() error { _, err := c.Mutex("x").Lock(ctx, dlock.WithTTL(time.Microsecond)); return err }, dlock.ErrInvalidArgument},
		{"sub-ms lease", func() error { _, err := c.Mutex("x").TryLock(ctx, dlock.WithLease(999*time.Microsecond)); return err }, dlock.ErrInvalidArgument},
		{"bad handle default", func() error { _, err := c.Mutex("x", dlock.WithLease(0)).Lock(ctx); return err }, dlock.ErrInvalidArgument},
		{"nil ctx lock", func() error { _, err := c.Mutex("x").Lock(nilCtx); return err }, dlock.ErrInvalidArgument},
		{"nil ctx trylock", func() error { _, err := c.Mutex("x").TryLock(nilCtx); return err }, dlock.ErrInvalidArgument},
		{"use after close", func() error { _, err := closed.Mutex("x").Lock(ctx); return err }, dlock.ErrClosed},
		{"try after close", func() error { _, err := closed.Mutex("x").TryLock(ctx); return err }, dlock.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}

	// Lease calls with bad input.
	l := mustLock(t, c.Mutex(lockName(t)), ctx)
	if err := l.Unlock(nilCtx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Unlock(nil) = %v", err)
	}
	if err := l.Extend(nilCtx, time.Second); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Extend(nil, 1s) = %v", err)
	}
	if err := l.Extend(ctx, -1); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Extend(-1) = %v", err)
	}
	if _, err := l.TTL(nilCtx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("TTL(nil) = %v", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("bad calls ended the lease: %v", err)
	}
	unlock(t, l)
	// A nil parent for Context is treated as Background, not a panic.
	if l.Context(nilCtx).Err() == nil {
		t.Fatal("context of an unlocked lease not cancelled")
	}
}

func TestNamesNeedNoEscapingByTheCaller(t *testing.T) {
	ctx := context.Background()
	a, b := client(t), client(t)
	suffix := lockName(t)
	names := []string{
		"{", "}", "}{", "{a}", "a}b{c", "with space", "new\nline", "tab\there",
		"日本語のロック", "emoji 🔒", "%7B", "%", "a:{b}:c", strings.Repeat("x", 1000),
	}
	var held []*dlock.Lease
	for _, n := range names {
		n += suffix
		l, err := a.Mutex(n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", n, err)
		}
		if _, err := b.Mutex(n).TryLock(ctx); err == nil || !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("name %q does not exclude: second TryLock = %v", n, err)
		}
		held = append(held, l)
	}
	// Every name got its own lock: none of them collided.
	for _, l := range held {
		unlock(t, l)
	}
}

// The commands an uncontended Lock + Unlock costs the server, counted by
// INFO commandstats on a server of its own (script-internal calls
// included): the lean path's budget, pinned so that a change to it is
// seen.
func TestUncontendedServerCommands(t *testing.T) {
	ctx := context.Background()
	rdb, m := warmMutex(t)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	unlock(t, mustLock(t, m, ctx))
	got := commandStats(t, rdb)
	want := map[string]int{
		"evalsha": 2, // Lock, Unlock
		// Lock: one EXISTS finds the lock free and no dead set (so its
		// token is not buried: a late attempt of an acquire given up on
		// takes nothing, bury.lua); fence it and take it (one SET PX of
		// the hold, stamped with the Client's clock: no TIME); a first
		// attempt has no place to give up (no ZREM)
		"exists": 2, "incr": 1, "set": 1,
		// Unlock: look for a waiter (EXISTS of the queue), free it if the
		// caller owns it (GET, DEL)
		"get": 1, "del": 1,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("an uncontended Lock+Unlock ran %v; want %v", got, want)
	}
}

// The commands a watchdog renewal costs the server (issue 47: the
// renewals of 100 000 leases of a 3 s TTL are 100 000 scripts a second):
// it reads the hold (GET) and lengthens it where it ends sooner (PEXPIRE
// GT: before Redis 7, PTTL then PEXPIRE), and rewrites no value (SET), as
// a renewal that only lengthens needs no place kept in the hold
// (internal/hold/doc.go, "Late commands").
func TestRenewalServerCommands(t *testing.T) {
	ctx := context.Background()
	rdb, m := warmMutex(t)
	l := mustLock(t, m, ctx, dlock.WithTTL(600*time.Millisecond)) // renewed every 200 ms
	defer unlock(t, l)
	var got map[string]int
	for range 2 { // the first renewal loads its script (NOSCRIPT, then EVAL): counted from the second
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		got = nil
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = commandStats(t, rdb); got["evalsha"] > 0 {
				break
			}
		}
	}
	n := got["evalsha"]
	if n == 0 {
		t.Fatal("no renewal within 5 s")
	}
	want := map[string]int{"evalsha": n, "get": n, "pexpire": n}
	if !maps.Equal(got, want) {
		t.Fatalf("%d renewals ran %v; want %v", n, got, want)
	}
}

// The commands an uncontended Campaign and Resign cost the server, as a
// service that campaigns again within a receipt's TTL meets them: the
// Resign before left its receipt, so the dead set exists.
func TestCampaignServerCommands(t *testing.T) {
	ctx := context.Background()
	rdb, e := ownElection(t)
	for range 2 { // the scripts loaded; the receipt left
		if err := campaign(t, e, "v").Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nextServerMs(t, rdb) // the receipt below lands after the last one's ms
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := campaign(t, e, "v").Resign(ctx); err != nil {
		t.Fatal(err)
	}
	got := commandStats(t, rdb)
	want := map[string]int{
		"evalsha": 2, // Campaign, Resign
		// Campaign: its token not buried (ZSCORE: a Campaign meets the
		// dead set, so it asks first), nobody holds or waits (one EXISTS of
		// the lock and the queue); take it with the value, stamp and fence
		// it (INCR, one SET PX, stamped with the Client's clock); its
		// observers told
		"zscore": 1, "exists": 2, "incr": 1, "time": 1, "set": 1, "publish": 2,
		// Resign: nobody waits (EXISTS of the queue), free it (GET, DEL),
		// its receipt (TIME, ZREMRANGEBYSCORE, ZADD, PEXPIRE GT); its
		// observers told
		"get": 1, "del": 1, "zremrangebyscore": 1, "zadd": 1, "pexpire": 1,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("an uncontended Campaign+Resign ran %v; want %v", got, want)
	}
}

// nextServerMs returns once the server's clock (TIME) has moved to a
// later millisecond than at the call: a receipt written after it expires
// later than one written before, so its PEXPIRE GT sets the dead set's
// expiry in one call (in the same millisecond GT sets nothing, and
// stretch asks NX too: a call more, and a count that would depend on
// timing).
func nextServerMs(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ms := func() int64 {
		now, err := rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMilli()
	}
	for first := ms(); ms() == first; {
	}
}

// commandStats reads INFO commandstats: calls by command, without the
// connections' set-up and health checks (a connection the client library
// opened meanwhile: its HELLO and CLIENT TRACKING are no part of the
// lock's work) and the test's own questions (skip).
func commandStats(t *testing.T, rdb *redis.Client, skip ...string) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if strings.HasPrefix(name, "config") || name == "info" || name == "hello" || name == "ping" ||
			strings.HasPrefix(name, "client") || slices.Contains(skip, name) {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		got[name] = n
	}
	return got
}

// The commands one acquisition of a contended Mutex costs the server: a
// waiter's Lock that finds it held and takes a place in the queue, and
// the holder's Unlock that hands it to that waiter (the work queue of
// bench/processes_test.go is this, over and over), counted as
// TestUncontendedServerCommands counts the lean path, and pinned so that
// a change to it is seen: a directed hand-off needs no more.
func TestHandOffServerCommands(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	t.Cleanup(func() { rdb.Close() })
	holder, waiter := newClient(t, rdb).Mutex("x"), newClient(t, rdb).Mutex("x")
	// handOff: the holder locks, the waiter waits, the holder unlocks;
	// stats, set, resets the server's counts once the holder holds.
	handOff := func(stats bool) {
		l := mustLock(t, holder, ctx)
		if stats {
			nextServerMs(t, rdb) // the receipt below lands after the last one's ms
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan *dlock.Lease, 1)
		go func() {
			wl, err := waiter.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- wl
		}()
		for { // until the waiter has its place: the queue is the signal
			n, err := rdb.ZCard(ctx, "dlock:{x}:queue").Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			runtime.Gosched()
		}
		unlock(t, l)
		wl := <-got
		if wl == nil {
			t.FailNow()
		}
		unlock(t, wl)
	}
	handOff(false) // the scripts loaded, the waiter's wake-ups subscribed
	handOff(true)
	// (and the waiter's Unlock, which found nobody waiting: GET, DEL, ZRANGE)
	stats := commandStats(t, rdb, "zcard")
	want := map[string]int{
		"evalsha": 3, // the waiter's Lock, the holder's Unlock (and the waiter's own, below)
		// Lock: is it free (one PTTL, which is also the wait: it is held,
		// so nothing more is asked of the common case), was the caller's
		// token buried (the dead set's ZSCORE: the release before left its
		// receipt there); is it the caller's own already (GET); its
		// place: the clock (one TIME), the last arrival (ZRANGE), the
		// queue (ZADD NX: a first attempt has no place to ask about) and
		// the places (ZADD), each set's expiry (one PEXPIRE: NX, as the
		// queue was empty, so both sets are new); the fence as it saw it
		// (GET)
		"pttl": 1, "zscore": 2, "time": 2, "zrange": 2, "zadd": 3, "pexpire": 3, "get": 3,
		// Unlock: the hold (the third GET), freed (DEL), the first waiter (ZRANGE:
		// anybody waiting, and who), the receipt (the
		// clock: one TIME; the expired receipts dropped: ZREMRANGEBYSCORE;
		// ZADD, and one PEXPIRE GT of the dead set, which the hand-off
		// before left), that waiter's place
		// alive (ZSCORE), its grant (INCR, one SET PX), its place given
		// up (two ZREMs) and its message (PUBLISH)
		"del": 1, "zremrangebyscore": 1, "incr": 1, "set": 1, "zrem": 2, "publish": 1,
	}
	// and the waiter's own Unlock, nobody waiting: GET, DEL, ZRANGE
	want["get"]++
	want["del"]++
	want["zrange"]++
	if !maps.Equal(stats, want) {
		t.Fatalf("a hand-off ran %v; want %v", stats, want)
	}
}

// An uncontended Lock+Unlock allocates a bounded number of objects: a
// count, so that an allocation that creeps into the hot path (a closure
// copying a struct, a map per hold, a value boxed per call) is seen. On
// go-redis (dlock's own connections) 17 were measured (2026-11-29; issue
// 35 asks for at most 20), 18-19 under the race detector, and the bound
// is 19; through rueidis or valkey-go (DLOCK_TEST_DRIVER), whose commands
// and replies are theirs, 19 (22 under the race detector), and the bound
// is 23. (Before the drivers' words on the stack, detach's shortcut and
// the lock reply's integers on the stack, 2026-11-29: 20 and 28 under
// the race detector.)
func TestUncontendedAllocations(t *testing.T) {
	ctx := context.Background()
	_, m := warmMutex(t)
	allocs := testing.AllocsPerRun(200, func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	allocsAtMost(t, "an uncontended Lock+Unlock", allocs, 19, 23)
}

// An uncontended Lock+Unlock whose ctx can end (a cancel, as every
// request's has) creates no goroutine, on every driver (DLOCK_TEST_DRIVER):
// its calls run on its caller's goroutine (issue 47: through rueidis and
// valkey-go each ran on a goroutine of its own, two per pair; go-redis's
// own connections never did). Counted over 200 pairs; what the clients'
// background makes meanwhile (a ping, a timer) is a few at most.
func TestUncontendedGoroutines(t *testing.T) {
	_, m := warmMutex(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pairs = 200
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := created()
	for range pairs {
		unlock(t, mustLock(t, m, ctx))
	}
	n := created() - before
	t.Logf("%d Lock+Unlock pairs with a cancellable ctx on %s: %d goroutines created", pairs, envdriver.Name(), n)
	if n > pairs/20 {
		t.Errorf("%d goroutines created over %d Lock+Unlock pairs; want at most %d (none per call)", n, pairs, pairs/20)
	}
}

// allocsAtMost fails t when what made more allocations than its bound:
// onGoRedis on dlock's own connections, elsewhere through rueidis or
// valkey-go (DLOCK_TEST_DRIVER), whose commands and replies are theirs.
func allocsAtMost(t *testing.T, what string, allocs, onGoRedis, elsewhere float64) {
	t.Helper()
	t.Logf("%s: %.0f allocations", what, allocs)
	bound := onGoRedis
	if envdriver.Name() != "go-redis" {
		bound = elsewhere
	}
	if allocs > bound {
		t.Errorf("%s made %.0f allocations; want at most %.0f", what, allocs, bound)
	}
}

// An uncontended Campaign+Resign allocates a bounded number of objects,
// as TestUncontendedAllocations counts a Lock+Unlock: an Election's
// request is made once per handle, not per Campaign, and its spans'
// attributes only when they are recorded. On go-redis 29 were measured
// (2026-11-29; 40 before those two, 31 before the lock reply's integers
// on the stack), 30-31 under the race detector; 31 and 33 since the
// Campaign's value goes in the hold's tail, after its label (2026-12-06:
// protocol.HoldTail, one string made per Campaign, which a labelled
// Campaign needs, saving it label.lua's round trip). The bound is 33
// there, 38 through rueidis or valkey-go (32, and 35 under the race
// detector, before the tail; 41 before the drivers' words on the stack
// and detach's shortcut).
func TestCampaignAllocations(t *testing.T) {
	ctx := context.Background()
	_, e := ownElection(t)
	campaign := func() {
		ld, err := e.Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	campaign() // the scripts loaded
	allocs := testing.AllocsPerRun(200, campaign)
	allocsAtMost(t, "an uncontended Campaign+Resign", allocs, 33, 38)
}

// warmMutex is a Mutex on a server of its own, taken and released once
// (its scripts are loaded, its Client recorded), and that server's client.
// ownElection is an Election on a server of its own, and that server's
// client (for its counts).
func ownElection(t *testing.T) (*redis.Client, *dlock.Election) {
	t.Helper()
	rdb := redistest.StartT(t, redistest.Options{}).Client()
	t.Cleanup(func() { rdb.Close() })
	return rdb, newClient(t, rdb).Election("x")
}

func warmMutex(t *testing.T) (*redis.Client, *dlock.Mutex) {
	t.Helper()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	t.Cleanup(func() { rdb.Close() })
	m := newClient(t, rdb).Mutex("x")
	unlock(t, mustLock(t, m, context.Background()))
	return rdb, m
}

// A labelled acquire writes its label into the hold it takes (lock.lua's
// tail): an uncontended labelled Lock, a FairMutex's and a Campaign are
// one round trip each, like an unlabelled one, and the label is there;
// only a hold handed over by a release needs label.lua after
// (TestLabelOfAWaiterHandedTheLock).
func TestLabelledAcquireIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t)
	for _, kind := range []string{"Mutex", "FairMutex", "Campaign"} {
		name := lockName(t)
		label := dlock.WithLabel("nightly " + kind)
		// lock acquires, and returns the release
		var lock func() (func(context.Context) error, error)
		switch kind {
		case "Mutex", "FairMutex":
			m := dlock.Locker(c.Mutex(name))
			if kind == "FairMutex" {
				m = c.FairMutex(name)
			}
			lock = func() (func(context.Context) error, error) {
				l, err := m.Lock(ctx, label)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		case "Campaign":
			e := c.Election(name, label)
			lock = func() (func(context.Context) error, error) {
				ld, err := e.Campaign(ctx, "the value")
				if err != nil {
					return nil, err
				}
				return ld.Resign, nil
			}
		}
		for i := range 2 { // the scripts loaded, then counted
			rec.take()
			release, err := lock()
			if err != nil {
				t.Fatal(err)
			}
			calls := rec.take()
			inspectKind := dlock.KindMutex
			if kind == "Campaign" {
				inspectKind = dlock.KindElection
			}
			info, err := c.Inspect(ctx, inspectKind, name)
			if err != nil || len(info.Holders) != 1 || info.Holders[0].Label != "nightly "+kind {
				t.Fatalf("%s: Inspect %+v, %v; want the label", kind, info, err)
			}
			if kind == "Campaign" && info.Value != "the value" {
				t.Fatalf("Campaign: the value %q; want it beside the label", info.Value)
			}
			if i == 1 && (len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "evalsha") {
				t.Errorf("%s: a labelled uncontended acquire sent %v; want exactly one evalsha", kind, calls)
			}
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
