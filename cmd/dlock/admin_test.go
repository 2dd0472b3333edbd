package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The operator's commands against the shared redis-server: the state is
// made with the library, read and changed with the CLI.

// labelled returns a library client under prefix that records label as
// its owner label, closed with the test.
func labelled(t *testing.T, prefix, label string) *dlock.Client {
	t.Helper()
	c, err := dlock.New(testClient(t), dlock.WithPrefix(prefix), dlock.WithOwnerLabel(label))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// admin runs an operator's command on the test server under prefix.
func admin(prefix, cmd string, args ...string) result {
	return runCLI(append([]string{cmd, "--redis", serverURL(), "--prefix", prefix}, args...)...)
}

// must fails the test unless r exited with code and wrote every want.
func must(t *testing.T, r result, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("code %d, want %d; stdout:\n%s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
}

// waitWaiters waits until the lock has n waiters.
func waitWaiters(t *testing.T, c *dlock.Client, kd dlock.Kind, name string, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d waiter(s) of %s %q", n, kd, name), func() bool {
		l, err := c.Inspect(context.Background(), kd, name)
		return err == nil && len(l.Waiters) == n
	})
}

// acquired is what a background Lock returned.
type acquired struct {
	l   *dlock.Lease
	err error
}

// background runs lock in a goroutine; the channel delivers its outcome.
func background(lock func() (*dlock.Lease, error)) <-chan acquired {
	c := make(chan acquired, 1)
	go func() {
		l, err := lock()
		c <- acquired{l, err}
	}()
	return c
}

// granted waits for a background Lock to succeed, and unlocks it with the
// test.
func granted(t *testing.T, c <-chan acquired, what string) *dlock.Lease {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case a := <-c:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		t.Cleanup(func() { a.l.Unlock(context.Background()) })
		return a.l
	case <-timer.C:
		t.Fatalf("%s: not granted within 5s", what)
		return nil
	}
}

// lost checks that each lease is told it was lost before ctx ends.
func lost(t *testing.T, ctx context.Context, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
				t.Errorf("a holder's lease ended with %v, want ErrLeaseLost", l.Err())
			}
		case <-ctx.Done():
			t.Fatalf("a holder (token %s) was not told that its lock was freed", l.Token())
		}
	}
}

// The JSON schema's field names, as docs/cli.md documents them.
var (
	lockFields   = []string{"capacity", "count", "fence", "free", "held", "holders", "kept_for", "key", "kind", "mode", "name", "ttl_ms", "value", "waiters"}
	holderFields = []string{"fence", "holds", "label", "owner", "side", "since", "token", "ttl_ms"}
	waiterFields = []string{"expires_ms", "owner", "permits", "side", "since", "token"}
	ownerFields  = []string{"client", "host", "label", "pid", "program", "started"}
)

// decodeLocks parses the JSON of inspect or ls, checking that every
// object has exactly the documented fields.
func decodeLocks(t *testing.T, out string) []lockJSON {
	t.Helper()
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	fields := func(what string, m map[string]json.RawMessage, want []string) {
		if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
			t.Errorf("%s fields %v, want %v", what, got, want)
		}
	}
	for _, l := range raw {
		fields("lock", l, lockFields)
		for part, want := range map[string][]string{"holders": holderFields, "waiters": waiterFields} {
			var list []map[string]json.RawMessage
			if err := json.Unmarshal(l[part], &list); err != nil || list == nil {
				t.Errorf("%s: %s, want an array (%v)", part, l[part], err)
			}
			for _, e := range list {
				fields(part, e, want)
				var o map[string]json.RawMessage
				if json.Unmarshal(e["owner"], &o) == nil && o != nil {
					fields("owner", o, ownerFields)
				}
			}
		}
	}
	var locks []lockJSON
	if err := json.Unmarshal([]byte(out), &locks); err != nil {
		t.Fatal(err)
	}
	return locks
}

// checkTime checks a JSON time: RFC 3339 in UTC, within a minute of now.
func checkTime(t *testing.T, what string, s *string) {
	t.Helper()
	if s == nil {
		t.Errorf("%s: null", what)
		return
	}
	at, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil || !strings.HasSuffix(*s, "Z") || time.Since(at).Abs() > time.Minute {
		t.Errorf("%s %q: want an RFC 3339 time in UTC, about now (%v)", what, *s, err)
	}
}

// TestInspectMutex: a re-entered Mutex with a waiter, its owners' labels
// and pids, in the report and in JSON; unlock --force hands it to the
// waiter and tells the holder.
func TestInspectMutex(t *testing.T) {
	const name = "a{b}%c/d" // braces and '%' are escaped in the key
	prefix := testPrefix(t)
	ctx := testCtx(t)
	holder := labelled(t, prefix, "cli-test")
	m := holder.Mutex(name, dlock.WithTTL(time.Second))
	lease, err := m.Lock(ctx, dlock.WithLabel("nightly report")) // the hold's label, beside its Client's
	if err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(lease.Context(ctx)) // re-entry: hold count 2
	if err != nil {
		t.Fatal(err)
	}
	other := labelled(t, prefix, "cli-waiter")
	waiter := background(func() (*dlock.Lease, error) { return other.Mutex(name).Lock(ctx) })
	waitWaiters(t, holder, dlock.KindMutex, name, 1)

	pid := strconv.Itoa(os.Getpid())
	r := admin(prefix, "inspect", name)
	must(t, r, exitOK, fmt.Sprintf("mutex %q (key %s:{a%%7Bb%%7D%%25c/d})", name, prefix),
		"held:      yes, by 1 holder\n", fmt.Sprintf("fence:     %d, the highest its holders have", lease.Fence()),
		"waiters:   1, in the order they will be served")
	holderRow := fieldsOf(r.stdout, lease.Token())
	if len(holderRow) != 11 || holderRow[1] != "2" || holderRow[2] != strconv.FormatInt(lease.Fence(), 10) ||
		holderRow[3] != `"nightly` || holderRow[4] != `report"` || holderRow[8] != pid || holderRow[10] != "cli-test" {
		t.Errorf("holder row %q: want token, holds 2, fence, label \"nightly report\", ..., pid %s, client label cli-test", holderRow, pid)
	}
	if w := fieldsOf(r.stdout, "1"); len(w) != 8 || w[5] != pid || w[7] != "cli-waiter" {
		t.Errorf("waiter row %q: want #1 with pid %s and label cli-waiter", w, pid)
	}
	if strings.Contains(r.stdout, "rwmutex") || strings.Contains(r.stdout, "latch") {
		t.Errorf("kinds that do not exist are shown:\n%s", r.stdout)
	}

	locks := decodeLocks(t, admin(prefix, "inspect", "--json", name).stdout)
	if len(locks) != 1 {
		t.Fatalf("JSON has %d locks, want 1", len(locks))
	}
	l := locks[0]
	if l.Kind != "mutex" || l.Name != name || !l.Held || l.TTLMs <= 0 || l.TTLMs > 1000 || l.Fence != lease.Fence() ||
		len(l.Holders) != 1 || len(l.Waiters) != 1 {
		t.Fatalf("JSON lock %+v", l)
	}
	host, _ := os.Hostname()
	h := l.Holders[0]
	if h.Token != lease.Token() || h.Holds != 2 || h.Fence != lease.Fence() || h.TTLMs <= 0 || h.Owner == nil ||
		h.Owner.Label != "cli-test" || h.Owner.PID != os.Getpid() || h.Owner.Host != host || h.Owner.Client != lease.Token()[:16] {
		t.Errorf("JSON holder %+v, owner %+v", h, h.Owner)
	}
	checkTime(t, "holder since", h.Since)
	checkTime(t, "owner started", h.Owner.Started)
	if w := l.Waiters[0]; w.Owner == nil || w.Owner.Label != "cli-waiter" || w.ExpiresMs <= 0 {
		t.Errorf("JSON waiter %+v, owner %+v", w, w.Owner)
	} else {
		checkTime(t, "waiter since", w.Since)
	}

	r = admin(prefix, "unlock", "--force", name)
	must(t, r, exitOK, "freed mutex", lease.Token(), "cli-test", "1 waiter: the next gets it",
		fmt.Sprintf("the next fence is above %d", lease.Fence()))
	next := granted(t, waiter, "the waiter after unlock --force")
	if next.Fence() <= lease.Fence() {
		t.Errorf("the waiter's fence %d, want above %d", next.Fence(), lease.Fence())
	}
	lost(t, ctx, lease, inner)
	must(t, admin(prefix, "inspect", "--kind", "fairmutex", name), exitOK, next.Token(), "cli-waiter")
}

// fieldsOf returns the whitespace-separated fields of the first line of
// out whose first field is first.
func fieldsOf(out, first string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// TestInspectEveryKind: one name, four kinds of lock — a Mutex, an
// RWMutex with two readers and a writer waiting, a Semaphore with permits
// out and a waiter, a Latch — all shown without --kind; then unlock
// --force frees each kind, and each waiter gets its turn.
func TestInspectEveryKind(t *testing.T) {
	const name = "job"
	prefix := testPrefix(t)
	ctx := testCtx(t)
	a := labelled(t, prefix, "reader-a")
	b := labelled(t, prefix, "reader-b")
	w := labelled(t, prefix, "waiter")

	mu, err := a.Mutex(name, dlock.WithTTL(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var readers []*dlock.Lease
	for _, c := range []*dlock.Client{a, b} {
		r, err := c.RWMutex(name, dlock.WithTTL(time.Second)).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	writer := background(func() (*dlock.Lease, error) { return w.RWMutex(name).Lock(ctx) })
	var permits []*dlock.Lease
	for _, n := range []int{2, 1} {
		p, err := a.Semaphore(name, 5, dlock.WithTTL(time.Second)).Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	four := background(func() (*dlock.Lease, error) { return w.Semaphore(name, 5).Acquire(ctx, 4) })
	latch := a.Latch(name)
	if _, err := latch.TrySetCount(ctx, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitWaiters(t, a, dlock.KindRWMutex, name, 1)
	waitWaiters(t, a, dlock.KindSemaphore, name, 1)

	r := admin(prefix, "inspect", name)
	must(t, r, exitOK, `mutex "job"`, `rwmutex "job"`, `semaphore "job"`, `latch "job"`,
		"mode:      read", "permits:   2 free of 5", "count:     3 (closed", "reader-a", "reader-b", "waiter")
	if f := fieldsOf(r.stdout, readers[1].Token()); len(f) != 11 || f[1] != "read" || f[4] != "-" || f[10] != "reader-b" {
		t.Errorf("reader row %q", f)
	}

	locks := decodeLocks(t, admin(prefix, "inspect", "--json", name).stdout)
	var kinds []string
	for _, l := range locks {
		kinds = append(kinds, l.Kind)
	}
	if !slices.Equal(kinds, []string{"mutex", "rwmutex", "semaphore", "latch"}) {
		t.Fatalf("JSON kinds %v", kinds)
	}
	rw, sem, lt := locks[1], locks[2], locks[3]
	if rw.Mode != "read" || len(rw.Holders) != 2 || rw.Holders[0].Side != "read" || len(rw.Waiters) != 1 ||
		rw.Waiters[0].Side != "write" || rw.Waiters[0].Owner == nil || rw.Waiters[0].Owner.Label != "waiter" {
		t.Errorf("rwmutex %+v", rw)
	}
	labels := []string{rw.Holders[0].Owner.Label, rw.Holders[1].Owner.Label}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"reader-a", "reader-b"}) {
		t.Errorf("readers' labels %v", labels)
	}
	if sem.Capacity != 5 || sem.Free != 2 || len(sem.Holders) != 2 || len(sem.Waiters) != 1 || sem.Waiters[0].Permits != 4 ||
		sem.Holders[0].Holds+sem.Holders[1].Holds != 3 {
		t.Errorf("semaphore %+v", sem)
	}
	if !lt.Held || lt.Count != 3 || lt.TTLMs <= 0 || len(lt.Holders) != 0 {
		t.Errorf("latch %+v", lt)
	}
	if l := decodeLocks(t, admin(prefix, "inspect", "--json", "--kind", "latch", name).stdout); len(l) != 1 || l[0].Kind != "latch" {
		t.Errorf("--kind latch: %+v", l)
	}

	r = admin(prefix, "unlock", "--force", name)
	if r.code != exitUsage || !strings.Contains(r.stderr, "4 kinds of lock") || !strings.Contains(r.stderr, "--kind") {
		t.Fatalf("unlock --force of a name with 4 kinds held: code %d, stderr %q; want a refusal", r.code, r.stderr)
	}

	must(t, admin(prefix, "unlock", "--force", "--kind", "rwmutex", name), exitOK,
		`freed rwmutex "job"`, readers[0].Token(), readers[1].Token())
	granted(t, writer, "the writer after unlock --force of the readers")
	must(t, admin(prefix, "unlock", "--force", "--kind", "semaphore", name), exitOK,
		`took back the 3 permits held of semaphore "job"`, permits[0].Token(), permits[1].Token())
	granted(t, four, "the semaphore's waiter for 4 of 5 permits")
	opened := make(chan error, 1)
	go func() { opened <- latch.Wait(ctx) }()
	must(t, admin(prefix, "unlock", "--force", "--kind", "latch", name), exitOK, `opened latch "job"`, "count was 3")
	if err := <-opened; err != nil {
		t.Errorf("latch Wait after unlock --force: %v", err)
	}
	must(t, admin(prefix, "unlock", "--force", "--kind", "mutex", name), exitOK, `freed mutex "job"`, mu.Token())
	lost(t, ctx, append(append(readers, permits...), mu)...)
	must(t, admin(prefix, "inspect", "--kind", "latch", name), exitOK, "count:     0 (open")
}

// TestLs lists locks of several kinds, filters them by pattern, and says
// when nothing matches.
func TestLs(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := labelled(t, prefix, "ls-test")
	m, err := c.Mutex("orders/1").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	rw, err := c.RWMutex("orders/2").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Unlock(ctx)
	sem, err := c.Semaphore("pools/db", 3).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Unlock(ctx)
	if _, err := c.Latch("boot").TrySetCount(ctx, 2, time.Minute); err != nil {
		t.Fatal(err)
	}

	r := admin(prefix, "ls")
	must(t, r, exitOK, "4 locks\n")
	for name, want := range map[string][]string{
		"orders/1": {"mutex", "yes", "ls-test)"},
		"orders/2": {"rwmutex", "yes", "ls-test)", "read"},
		"pools/db": {"semaphore", "yes", "ls-test)", "1/3"},
		"boot":     {"latch", "yes", "-", "count"},
	} {
		line := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == name {
				line = l
			}
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("ls line of %s %q lacks %q", name, line, w)
			}
		}
	}

	locks := decodeLocks(t, admin(prefix, "ls", "--json", "orders/*").stdout)
	if len(locks) != 2 || locks[0].Name != "orders/1" || locks[0].Kind != "mutex" || locks[1].Kind != "rwmutex" ||
		locks[0].Holders[0].Token != m.Token() || locks[1].Holders[0].Token != rw.Token() {
		t.Errorf("ls --json orders/*: %+v", locks)
	}
	if l := decodeLocks(t, admin(prefix, "ls", "--json", "nothing*").stdout); len(l) != 0 {
		t.Errorf("ls --json of no match: %+v, want []", l)
	}
	must(t, admin(prefix, "ls", "*/db"), exitOK, "pools/db", "1 lock\n") // "*" stops at "/"
	must(t, admin(prefix, "ls", "x*"), exitOK, fmt.Sprintf("no locks under prefix %q matching \"x*\"", prefix))
}

// TestAdminRefusesOtherKeys: a key that is no lock is reported, and
// unlock --force leaves it alone.
func TestAdminRefusesOtherKeys(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	rdb := testClient(t)
	key := keysFor(prefix, "not-a-lock").Lock
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, key, "x").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	for _, args := range [][]string{{"inspect", "not-a-lock"}, {"unlock", "--force", "not-a-lock"}} {
		r := admin(prefix, args[0], args[1:]...)
		if r.code != exitFail || !strings.Contains(r.stderr, "is a list, not a dlock mutex") {
			t.Errorf("%s of a list key: code %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if v, err := rdb.LRange(ctx, key, 0, -1).Result(); err != nil || !slices.Equal(v, []string{"x"}) {
		t.Errorf("the key was changed: %q, %v", v, err)
	}
}

// TestInspectNothing: a name with no lock of any kind, and unlock --force
// of it.
func TestInspectNothing(t *testing.T) {
	prefix := testPrefix(t)
	must(t, admin(prefix, "inspect", "never-used"), exitOK, `no lock called "never-used"`)
	must(t, admin(prefix, "inspect", "--kind", "semaphore", "never-used"), exitOK, "held:      no", "fence:     none held")
	if r := admin(prefix, "inspect", "--json", "never-used"); r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("inspect --json of nothing: %q, want []", r.stdout)
	}
	must(t, admin(prefix, "unlock", "--force", "never-used"), exitNothing, "nothing freed")
}

// TestTopRuns runs top for two refreshes against a held lock.
func TestTopRuns(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	l, err := labelled(t, prefix, "top-test").Mutex("top/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	r := admin(prefix, "top", "--iterations", "2", "--interval", "100ms")
	must(t, r, exitOK, "top/held", "top-test)", "1 lock, 1 held, 0 waiters, 0.0 acquisitions/s")
	if n := strings.Count(r.stdout, "dlock top "); n != 2 || strings.Contains(r.stdout, "\x1b") {
		t.Errorf("%d frames, want 2, and no screen clearing into a pipe:\n%q", n, r.stdout)
	}
}

// TestAdminUnreachable: no server gives a clear error, not a hang. (The
// commands run at once: go-redis takes seconds to give up.)
func TestAdminUnreachable(t *testing.T) {
	cmds := [][]string{{"inspect", "x"}, {"ls"}, {"top"}, {"unlock", "--force", "x"}}
	results := make(chan []any, len(cmds))
	for _, c := range cmds {
		go func() {
			results <- []any{c[0], runCLI(append([]string{c[0], "--redis", "redis://127.0.0.1:1"}, c[1:]...)...)}
		}()
	}
	for range cmds {
		got := <-results
		cmd, r := got[0], got[1].(result)
		if r.code != exitFail || !strings.Contains(r.stderr, "cannot reach Redis at 127.0.0.1:1") {
			t.Errorf("%s: code %d, stderr %q; want 1 and a clear error", cmd, r.code, r.stderr)
		}
	}
}
