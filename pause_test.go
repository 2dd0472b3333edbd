//go:build linux

package dlock_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A waiting process paused longer than its place and its lease is handed
// the lock while paused; the hand-off's message waits unread in its
// socket, the handed hold expires, and another owner takes the lock with a
// higher fence. Resumed, the paused waiter must not take the stale message
// for a grant — whichever comes first of its overdue place renewal and the
// message — and every lease it is given begins with a fence above the one
// granted while it was paused. (Issue 16: with the renewal first, the
// stale hand-off was honoured in about half the rounds: two owners.)
func TestPausedWaiterIsNotGrantedALateHandOff(t *testing.T) {
	t.Parallel() // a helper process of its own that it stops, mostly waiting: beside the other such tests
	for _, kind := range []struct {
		mode string
		lock func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker
	}{
		{"mutexwait", func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker {
			return c.Mutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl))
		}},
		{"fairwait", func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker {
			return c.FairMutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl))
		}},
	} {
		t.Run(kind.mode, func(t *testing.T) {
			// The race is between two ready events after SIGCONT: about one
			// round in two met it before the fix.
			const rounds = 4
			for range rounds {
				pausedWaiterRound(t, srv, kind.mode, kind.lock, nil)
			}
		})
	}
}

// pausedWaiterRound is one round of the paused waiter's scene on server
// s. clock, if set, is the scene on a server whose clock the test moves
// (see TestReplayedHandOffWithTheServerClockStandingStill): it is called
// with "start" before the first lock, with "expire" to make the handed hold and B's places expire, and with
// "resume" once another owner holds the lock, before B resumes.
func pausedWaiterRound(t *testing.T, s *redistest.Server, mode string, lock func(*dlock.Client, string, time.Duration) dlock.Locker,
	clock func(t *testing.T, at string)) {
	const ttl = 400 * time.Millisecond
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, s)
	k := keysOf(name).Lock
	on := func() *dlock.Client { return newClient(t, newRedis(t, s)) }
	if clock != nil {
		clock(t, "start")
	}
	held := mustLock(t, lock(on(), name, ttl), ctx)

	// B waits with two goroutines: two places in the queue.
	b := startHelper(t, mode, addrEnv+"="+s.Addr(), nameEnv+"="+name, ttlEnv+"="+ttl.String())
	b.send(t, "wait 1")
	b.send(t, "wait 2")
	waitFor(t, "both waiters queued", func() bool { return admin.ZCard(ctx, k+":queue").Val() == 2 })
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = b.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// SIGSTOP takes effect on each thread as the kernel gets to it: wait
	// until none runs, so that the hand-off below comes while B is paused.
	waitFor(t, "B stopped", func() bool { return stopped(t, b.cmd.Process.Pid) })

	// The release hands the lock to B's first waiter, which cannot read
	// the message; then the handed hold and B's places expire.
	unlock(t, held)
	if clock != nil {
		clock(t, "expire")
	}
	waitFor(t, "the handed hold and the places expired", func() bool {
		return admin.Exists(ctx, k, k+":queue").Val() == 0
	})
	c := mustLock(t, lock(on(), name, ttl), ctx)
	if clock != nil {
		clock(t, "resume")
	}
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true

	// Once both resumed waiters are queued again, each has made an
	// attempt since; then the lock is given up, so that they get it in
	// turn. A grant before that, while C holds the lock, is two owners.
	granted := 0
	check := func(line string) {
		f := strings.Fields(line) // granted <id> <fence>
		if len(f) != 3 || f[0] != "granted" {
			t.Fatalf("the resumed waiter said %q", line)
		}
		granted++
		if fence, _ := strconv.ParseInt(f[2], 10, 64); fence <= c.Fence() {
			t.Fatalf("the resumed waiter was granted fence %d, after fence %d had been granted to another owner: "+
				"a hand-off that arrived late was honoured", fence, c.Fence())
		}
	}
	waitFor(t, "both resumed waiters queued again", func() bool {
		select {
		case line := <-b.lines:
			check(line)
		default:
		}
		return admin.ZCard(ctx, k+":queue").Val() == 2
	})
	if err := c.Err(); err != nil {
		t.Fatalf("the owner after the pause lost its lease: %v", err)
	}
	unlock(t, c)
	for granted < 2 {
		check(b.expect(t, "granted", 20*time.Second))
	}
	_ = b.stdin.Close()
}

// Issue 33, item 10: the paused waiter's scene on a server whose clock
// stands still while B queues, waits and is handed the lock, then runs on
// from there (the handed hold expires in real time, and another owner
// takes the lock), and steps back to where it stood, standing still,
// before B resumes. B's new places then expire when its old one did; a
// place named by its expiry made the stale hand-off look like one about
// B's newest place, and B took a lock another owner held (two owners).
// (No forward step: one would expire the handed hold early, which no
// lease survives: guarantees.md, "The server's clock".)
func TestReplayedHandOffWithTheServerClockStandingStill(t *testing.T) {
	t.Parallel() // servers of its own, mostly waiting: beside the other such tests
	s := clockServer(t)
	var frozen time.Time
	clock := func(t *testing.T, at string) {
		var err error
		switch at {
		case "start":
			frozen = time.Now()
			err = s.SetClock(redistest.Frozen(frozen))
		case "expire": // the clock runs again from where it stood: no step
			err = s.SetClock(redistest.Offset(frozen.Sub(time.Now())))
		case "resume": // and steps back to where it stood, and stands still
			err = s.SetClock(redistest.Frozen(frozen))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []struct {
		mode string
		lock func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker
	}{
		{"mutexwait", func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker {
			return c.Mutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl))
		}},
		{"fairwait", func(c *dlock.Client, name string, ttl time.Duration) dlock.Locker {
			return c.FairMutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl))
		}},
	} {
		t.Run(kind.mode, func(t *testing.T) {
			t.Cleanup(func() { _ = s.SetClock(redistest.Clock{}) })
			// As above, a race between two ready events after SIGCONT. The
			// hand-off is the scripts' and acquisition.HandedOver's, not the driver's:
			// 16 rounds on the default driver under ./test.sh --full, 4
			// otherwise (f1acfe2: the stale hand-off was honoured 3 of 3 runs).
			rounds := 4
			if envdriver.Name() == "go-redis" && redistest.Full() {
				rounds = 16
			}
			for range rounds {
				pausedWaiterRound(t, s, kind.mode, kind.lock, clock)
			}
		})
	}
}

// stopped reports whether every thread of process pid is stopped, as
// /proc/<pid>/task/*/stat says (state T).
func stopped(t *testing.T, pid int) bool {
	stats, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of process %d: %v", pid, err)
	}
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			return false // a thread that just ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses
		_, rest, _ := strings.Cut(string(b[strings.LastIndexByte(string(b), ')')+1:]), " ")
		if !strings.HasPrefix(rest, "T") && !strings.HasPrefix(rest, "t") {
			return false
		}
	}
	return true
}

// A reader waiting in another process is paused (SIGSTOP) while a
// writer's release admits it to the next read phase; its place expires,
// a second writer takes the lock, and the reader is continued. Resumed,
// it must not read while that writer holds the lock: the admission it
// missed gives it no hold, and its next attempt queues behind the writer.
func TestPausedReaderIsNotLetInBesideAWriter(t *testing.T) {
	const ttl = 400 * time.Millisecond
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	k := fmt.Sprintf("%s:{%s}:rw", dlock.DefaultPrefix, name)
	rw := func() *dlock.RWMutex { return client(t).RWMutex(name, dlock.WithTTL(ttl), dlock.WithQueueTTL(ttl)) }
	first := mustLock(t, rw(), ctx)

	r := startHelper(t, "readwait", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"="+ttl.String())
	r.send(t, "wait 1")
	waitFor(t, "the reader queued", func() bool { return admin.ZCard(ctx, k+":rqueue").Val() == 1 })
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	waitFor(t, "the reader stopped", func() bool { return stopped(t, r.cmd.Process.Pid) })

	// The release admits the paused reader; its place expires unused, and
	// a second writer gets the lock.
	unlock(t, first)
	if n := admin.ZCard(ctx, k+":rphase").Val(); n != 1 {
		t.Fatalf("%d readers admitted by the writer's release; want the paused one", n)
	}
	second := mustLock(t, rw(), ctx)
	before, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true

	// Once the reader has a place made after it was continued (its expiry
	// is past the server's time then) it has made an attempt since; a
	// grant before the writer lets go is a reader beside a writer.
	since := strconv.FormatInt(before.UnixMilli(), 10)
	waitFor(t, "the resumed reader queued again", func() bool {
		select {
		case line := <-r.lines:
			t.Fatalf("the resumed reader said %q while a writer held the lock", line)
		default:
		}
		return admin.ZCount(ctx, k+":rqueue", "("+since, "+inf").Val() == 1
	})
	if err := second.Err(); err != nil {
		t.Fatalf("the writer lost its lease: %v", err)
	}
	unlock(t, second)
	r.expect(t, "granted", 20*time.Second)
	_ = r.stdin.Close()
}
