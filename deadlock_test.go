package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Deadlocks across processes: each party is a process of its own (the
// test binary as a helper, mode "party") that takes its holds, says
// "held", and on "go" waits for one more lock through its holds'
// contexts. The parties are told to go in order, so the last is the
// youngest wait: the victim.
const (
	partyEnv   = "DLOCK_TEST_PARTY"   // "<hold>,<hold>...><wait>": specs kind:name (see partyLock)
	clusterEnv = "DLOCK_TEST_CLUSTER" // comma-separated cluster nodes (instead of DLOCK_TEST_ADDR)
	delayEnv   = "DLOCK_TEST_DELAY"   // WithDeadlockDelay
)

// partyResult is what a party said once its wait ended.
type partyResult struct {
	deadlock bool
	cycle    int           // the cycle's length, for a deadlock
	after    time.Duration // from "go" to the wait's end
}

// runParties runs one party per spec on the server at addrs (cluster
// when more than one) and returns what each said, in spec order.
func runParties(t *testing.T, addrs []string, delay time.Duration, specs ...string) []partyResult {
	t.Helper()
	env := []string{addrEnv + "=" + addrs[0], delayEnv + "=" + delay.String()}
	if len(addrs) > 1 {
		env = append(env, clusterEnv+"="+strings.Join(addrs, ","))
	}
	var hs []*helper
	for _, sp := range specs {
		h := startHelper(t, "party", append(env, partyEnv+"="+sp)...)
		h.expect(t, "held", 20*time.Second)
		hs = append(hs, h)
	}
	watch := newClient(t, partyRedis(t, addrs))
	for i, h := range hs {
		if _, err := fmt.Fprintln(h.stdin, "go"); err != nil {
			t.Fatal(err)
		}
		h.expect(t, "waiting", 10*time.Second)
		// in order: each wait recorded before the next begins, so each
		// is younger than the one before
		waitRecorded(t, watch, specs[i])
	}
	out := make([]partyResult, len(hs))
	for i, h := range hs {
		line := h.expect(t, "", 30*time.Second)
		var r partyResult
		var ms int64
		switch {
		case strings.HasPrefix(line, "deadlock "):
			r.deadlock = true
			if _, err := fmt.Sscanf(line, "deadlock %d %d", &r.cycle, &ms); err != nil {
				t.Fatalf("party %d said %q", i, line)
			}
		case strings.HasPrefix(line, "got "):
			if _, err := fmt.Sscanf(line, "got %d", &ms); err != nil {
				t.Fatalf("party %d said %q", i, line)
			}
		default:
			t.Fatalf("party %d (%s) said %q", i, specs[i], line)
		}
		r.after = time.Duration(ms) * time.Millisecond
		out[i] = r
		h.expect(t, "done", 30*time.Second)
	}
	return out
}

// partyRedis is a go-redis client of the server or cluster at addrs.
func partyRedis(t *testing.T, addrs []string) redis.UniversalClient {
	var rdb redis.UniversalClient
	if len(addrs) > 1 {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 8})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	}
	t.Cleanup(func() {
		_ = rdb.Close()
		envdriver.Forget(rdb)
	})
	return rdb
}

// waitRecorded returns once the wait of a party's spec is recorded
// (Snapshot.Waits names what it waits for), or fails the test after 10 s.
func waitRecorded(t *testing.T, c *dlock.Client, spec string) {
	t.Helper()
	_, want, _ := strings.Cut(spec, ">")
	_, names, _ := strings.Cut(want, ":")
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Snapshot(context.Background(), dlock.SnapshotOptions{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range s.Waits {
			for _, n := range strings.Split(names, "+") {
				if w.For[0].Name == n {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wait of %q was not recorded within 10 s", spec)
		}
		time.Sleep(5 * time.Millisecond) // (polls Redis: no signal crosses the processes)
	}
}

// checkOneVictim checks that exactly the youngest party gave up, within
// the delay plus a second, with the whole cycle, and that the rest got
// their locks.
func checkOneVictim(t *testing.T, rs []partyResult, delay time.Duration) {
	t.Helper()
	for i, r := range rs {
		if r.deadlock {
			t.Logf("party %d of %d gave up %v after its wait began (delay %v)", i+1, len(rs), r.after, delay)
		}
		last := i == len(rs)-1
		switch {
		case last && !r.deadlock:
			t.Errorf("party %d, the youngest, got its lock: no deadlock found (%+v)", i, rs)
		case !last && r.deadlock:
			t.Errorf("party %d, not the youngest, gave up (%+v)", i, rs)
		case r.deadlock && r.cycle != len(rs):
			t.Errorf("a cycle of %d waits named; the parties are %d", r.cycle, len(rs))
		case r.deadlock && r.after > delay+time.Second:
			t.Errorf("the deadlock was broken %v after the last wait began; want within %v", r.after, delay+time.Second)
		}
	}
}

// checkNothingLeft checks that no lock named base... is held and no wait
// is recorded.
func checkNothingLeft(t *testing.T, c *dlock.Client, base string) {
	t.Helper()
	ctx := context.Background()
	s, err := c.Snapshot(ctx, dlock.SnapshotOptions{Pattern: base + "*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range s.Locks {
		if l.Held {
			t.Errorf("%s %q still held: %+v", l.Kind, l.Name, l.Holders)
		}
	}
	for _, w := range s.Waits {
		if strings.HasPrefix(w.For[0].Name, base) {
			t.Errorf("a wait is still recorded: %+v", w)
		}
	}
}

func TestDeadlockTwoProcessesReadOnWrite(t *testing.T) {
	t.Parallel()
	const delay = time.Second // the default's
	b := lockName(t)
	rs := runParties(t, []string{srv.Addr()}, delay,
		"mutex:"+b+"-a>read:"+b+"-rw",
		"write:"+b+"-rw>mutex:"+b+"-a")
	checkOneVictim(t, rs, delay)
	checkNothingLeft(t, client(t), b)
}

func TestDeadlockThreeProcessesPermitMutexLockAll(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	b := lockName(t)
	rs := runParties(t, []string{srv.Addr()}, delay,
		"mutex:"+b+"-a>sem:"+b+"-s",
		"sem:"+b+"-s>all:"+b+"-c+"+b+"-d",
		"mutex:"+b+"-d>mutex:"+b+"-a")
	checkOneVictim(t, rs, delay)
	checkNothingLeft(t, client(t), b)
}

func TestDeadlockFiveProcessesEveryKind(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	b := lockName(t)
	rs := runParties(t, []string{srv.Addr()}, delay,
		"fair:"+b+"-a>election:"+b+"-e",
		"election:"+b+"-e>write:"+b+"-w",
		"read:"+b+"-w>sem:"+b+"-s",
		"sem:"+b+"-s>all:"+b+"-m+"+b+"-n",
		"mutex:"+b+"-n>fair:"+b+"-a")
	checkOneVictim(t, rs, delay)
	checkNothingLeft(t, client(t), b)
}

func TestDeadlockOnACluster(t *testing.T) {
	cl := redistest.StartClusterT(t, redistest.ClusterOptions{})
	var addrs []string
	for _, n := range cl.Nodes() {
		addrs = append(addrs, n.Addr())
	}
	const delay = 300 * time.Millisecond
	b := lockName(t)
	// three parties, their locks in different slots; LockAll takes its
	// parts one by one there, holding the first while it waits
	rs := runParties(t, addrs, delay,
		"mutex:"+b+"-a>read:"+b+"-rw",
		"write:"+b+"-rw>all:"+b+"-c+"+b+"-d",
		"sem:"+b+"-d-x,mutex:"+b+"-d>mutex:"+b+"-a")
	checkOneVictim(t, rs, delay)
	checkNothingLeft(t, newClient(t, clusterClient(t, cl)), b)
}

// helperParty is a party: it takes its holds, says "held", waits for
// "go" on stdin, says "waiting", and waits for its last lock through its
// holds' contexts; then it says "deadlock <cycle length> <ms>" or "got
// <ms>", releases everything, and says "done".
func helperParty(ctx context.Context) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "party:", err); return 1 }
	delay, _ := time.ParseDuration(os.Getenv(delayEnv))
	var rdb redis.UniversalClient
	if nodes := os.Getenv(clusterEnv); nodes != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(nodes, ","), MaxRedirects: 8})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: os.Getenv(addrEnv)})
	}
	defer rdb.Close()
	defer envdriver.Forget(rdb)
	c, err := envdriver.New(rdb, dlock.WithDeadlockDelay(delay))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	spec := strings.SplitN(os.Getenv(partyEnv), ">", 2)
	var held []partyHold
	hctx := ctx
	for _, h := range strings.Split(spec[0], ",") {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		l, err := partyLock(lctx, c, h)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("hold %s: %w", h, err))
		}
		held = append(held, l)
		hctx = l.Context(hctx)
	}
	fmt.Println("held")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(hctx, 20*time.Second)
	defer cancel()
	fmt.Println("waiting")
	start := time.Now()
	l, err := partyLock(wctx, c, spec[1])
	took := time.Since(start).Milliseconds()
	var de *dlock.DeadlockError
	switch {
	case errors.As(err, &de):
		if !errors.Is(err, dlock.ErrDeadlock) || !errors.Is(err, dlock.ErrNotObtained) {
			return fail(fmt.Errorf("%v: does not match ErrDeadlock and ErrNotObtained", err))
		}
		fmt.Fprintln(os.Stderr, "party gave up:", err)
		fmt.Printf("deadlock %d %d\n", len(de.Waits), took)
	case err != nil:
		return fail(fmt.Errorf("wait %s: %w", spec[1], err))
	default:
		fmt.Printf("got %d\n", took)
		if err := l.Unlock(ctx); err != nil {
			return fail(err)
		}
	}
	for i := len(held) - 1; i >= 0; i-- {
		if err := held[i].Unlock(ctx); err != nil {
			return fail(err)
		}
	}
	fmt.Println("done")
	return 0
}

// partyLock takes one lock by its spec, kind:name: mutex, fair, read and
// write (an RWMutex's sides), sem (one permit of a Semaphore of one),
// election (its leadership), all:n1+n2 (a LockAll of Mutexes).
func partyLock(ctx context.Context, c *dlock.Client, spec string) (partyHold, error) {
	kind, name, _ := strings.Cut(spec, ":")
	switch kind {
	case "mutex":
		return lease(c.Mutex(name).Lock(ctx))
	case "fair":
		return lease(c.FairMutex(name).Lock(ctx))
	case "read":
		return lease(c.RWMutex(name).RLock(ctx))
	case "write":
		return lease(c.RWMutex(name).Lock(ctx))
	case "sem":
		return lease(c.Semaphore(name, 1).Acquire(ctx, 1))
	case "election":
		ld, err := c.Election(name).Campaign(ctx, "party")
		if err != nil {
			return nil, err
		}
		return leader{ld}, nil
	case "all":
		var ls []dlock.Locker
		for _, n := range strings.Split(name, "+") {
			ls = append(ls, c.Mutex(n))
		}
		return lease(dlock.LockAll(ctx, ls...))
	}
	return nil, fmt.Errorf("unknown lock spec %q", spec)
}

// partyHold is a lease, or a leadership.
type partyHold interface {
	Context(parent context.Context) context.Context
	Unlock(ctx context.Context) error
}

// lease is a lease as a partyHold (nil when err).
func lease(l *dlock.Lease, err error) (partyHold, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// leader is a leadership as a partyHold.
type leader struct{ *dlock.Leadership }

func (l leader) Unlock(ctx context.Context) error { return l.Resign(ctx) }
