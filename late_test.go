package dlock_test

// Commands that reach the server late: the client gave up on them (its
// ctx ended, or go-redis's ReadTimeout passed and it closed the
// connection), but their bytes were already on their way, and TCP
// delivered them after a stall. "The client library is done with the
// call" never means "the server cannot run it" (internal/hold/hold.go, "Late
// commands"). Each test failed on the code before the hold's sequence.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// lateDriver passes every command through, except those its hold
// predicate picks while armed: the caller is told its ctx ended (as when
// it gave up), and the command is kept, to run on the server when the
// test delivers it — exactly the bytes the client sent, late.
//
// With block set, the held call does not return at once: it waits for
// deliver, runs then, and returns the server's reply — as a call does
// when the server is paused (CLIENT PAUSE) and its caller's ctx ends
// meanwhile: the library is done only after the server ran it.
type lateDriver struct {
	driver.Driver
	mu    sync.Mutex
	pick  func(args []any) bool
	held  []driver.Command
	armed bool
	block bool
	twice bool // run the held call twice and answer the second reply (go-redis's re-send)
	// resend: the held call's first copy stays held (its path stalled);
	// after resend a second copy runs and answers, as go-redis sends a
	// call again after its ReadTimeout (Info says so: ResendAfter)
	resend  time.Duration
	between func()        // with twice: run between the two copies
	go_     chan struct{} // closed by deliver, for a blocked call
	watch   func(args []any) bool
	watched chan struct{} // closed when a command that watch picks is sent
}

// seen returns a channel closed when a command whose arguments pick
// reports true is sent from now on.
func (d *lateDriver) seen(pick func(args []any) bool) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watch, d.watched = pick, make(chan struct{})
	return d.watched
}

// hold arms the driver: the next command whose arguments contain every
// one of words (compared as text) is held back.
func (d *lateDriver) hold(words ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = true
	d.pick = func(args []any) bool {
		for _, w := range words {
			if !slices.ContainsFunc(args, func(a any) bool { return fmt.Sprint(a) == fmt.Sprint(w) }) {
				return false
			}
		}
		return true
	}
}

// take reports whether cmd is to be held, and holds it.
func (d *lateDriver) take(cmd driver.Command) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watch != nil && d.watch(cmd.Args) {
		close(d.watched)
		d.watch = nil
	}
	if !d.armed || !d.pick(cmd.Args) {
		return false
	}
	d.armed = false
	d.held = append(d.held, cmd)
	return true
}

// Info is the wrapped driver's, with resend as its ResendAfter, and not
// bound by ctx: a held call ignores its ctx, so the Client bounds it (as
// it does go-redis's calls when they go through the client).
func (d *lateDriver) Info() driver.Info {
	i := d.Driver.Info()
	i.ResendAfter = d.resend
	i.CtxBound = false
	return i
}

func (d *lateDriver) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	if d.take(cmd) {
		if d.resend > 0 {
			time.Sleep(d.resend) // go-redis's ReadTimeout, then the second copy
			return d.Driver.Do(ctx, cmd)
		}
		d.mu.Lock()
		block, go_ := d.block, d.go_
		d.held = slices.DeleteFunc(d.held, func(c driver.Command) bool { return d.twice })
		d.mu.Unlock()
		if block {
			<-go_
			return d.Driver.Do(context.Background(), cmd)
		}
		if d.twice {
			d.Driver.Do(ctx, cmd)
			if d.between != nil {
				d.between()
			}
			return d.Driver.Do(ctx, cmd)
		}
		return driver.Reply{Err: context.DeadlineExceeded}
	}
	return d.Driver.Do(ctx, cmd)
}

func (d *lateDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	var pass []driver.Command
	var at []int
	for i, c := range cmds {
		if d.take(c) {
			if d.resend > 0 {
				time.Sleep(d.resend) // go-redis's ReadTimeout, then the second copy
				pass, at = append(pass, c), append(at, i)
				continue
			}
			out[i] = driver.Reply{Err: context.DeadlineExceeded}
			continue
		}
		pass = append(pass, c)
		at = append(at, i)
	}
	if len(pass) > 0 {
		for j, r := range d.Driver.Pipeline(ctx, pass) {
			out[at[j]] = r
		}
	}
	return out
}

// deliver runs the held commands on the server, in the order they were
// sent, and returns their replies.
func (d *lateDriver) deliver(t *testing.T) []driver.Reply {
	t.Helper()
	d.mu.Lock()
	held := d.held
	d.held = nil
	if d.block {
		close(d.go_)
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	if len(held) == 0 {
		t.Fatal("no command was held back")
	}
	var out []driver.Reply
	for _, c := range held {
		out = append(out, d.Driver.Do(context.Background(), c))
	}
	return out
}

// lateClient returns a Client on the shared server whose commands the
// returned lateDriver can hold back.
func lateClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *lateDriver) {
	t.Helper()
	d := &lateDriver{Driver: goRedisDriver(t, newRedis(t, srv))}
	c, err := dlock.NewWithDriver(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, d
}

// pttl is the lock key's time to live on the server.
func pttl(t *testing.T, key string) time.Duration {
	t.Helper()
	ms, err := newRedis(t, srv).PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// An Extend to a short lease, given up on and delivered after a later
// Extend confirmed a long one, must change nothing: the holder counts on
// the long one. For every kind of hold (renew.lua, sem_renew.lua,
// rw_renew.lua).
func TestLateExtendNeverShortens(t *testing.T) {
	ctx := context.Background()
	takes := map[string]func(c *dlock.Client, name string) (*dlock.Lease, error){
		"Mutex": func(c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Mutex(name).Lock(ctx, dlock.WithTTL(30*time.Second))
		},
		"Semaphore": func(c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Semaphore(name, 1).Acquire(ctx, 1, dlock.WithTTL(30*time.Second))
		},
		"RWMutex.read": func(c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.RWMutex(name).RLock(ctx, dlock.WithTTL(30*time.Second))
		},
		"RWMutex.write": func(c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.RWMutex(name).Lock(ctx, dlock.WithTTL(30*time.Second))
		},
	}
	for kind, take := range takes {
		t.Run(kind, func(t *testing.T) {
			c, d := lateClient(t)
			l, err := take(c, lockName(t))
			if err != nil {
				t.Fatal(err)
			}
			defer unlock(t, l)
			d.hold("317")
			if err := l.Extend(ctx, 317*time.Millisecond); err == nil {
				t.Fatal("the held Extend returned nil")
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			d.deliver(t)
			if left, err := l.TTL(ctx); err != nil || left < 30*time.Second {
				t.Fatalf("after the late Extend the hold has %v left (%v) while the lease, held (Err %v), counts on a minute", left, err, l.Err())
			}
		})
	}
}

// A re-entry (which renews the lease to its TTL) delivered after an
// Extend lengthened the lease must not shorten it.
func TestLateReentryNeverShortens(t *testing.T) {
	ctx := context.Background()
	c, d := lateClient(t)
	m := c.Mutex(lockName(t))
	l := mustLock(t, m, ctx, dlock.WithTTL(2*time.Second))
	defer unlock(t, l)

	d.hold("2000", "2") // ttl ms, count 2
	if _, err := m.Lock(l.Context(ctx)); err == nil {
		t.Fatal("the held re-entry returned nil")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	d.deliver(t)
	if left := pttl(t, keysOf(m.Name()).Lock); left < 30*time.Second {
		t.Fatalf("the late re-entry shortened the lock to %v while the lease counts on a minute", left)
	}
}

// A Proclaim given up on and delivered after a later Proclaim succeeded
// must not overwrite the later value.
func TestLateProclaimNeverOverwrites(t *testing.T) {
	ctx := context.Background()
	c, d := lateClient(t)
	e := c.Election(lockName(t))
	ld, err := e.Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ld.Resign(ctx) }()

	d.hold("v1")
	if err := ld.Proclaim(ctx, "v1"); err == nil {
		t.Fatal("the held Proclaim returned nil")
	}
	if err := ld.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	d.deliver(t)
	info, err := client(t).Election(e.Name()).Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Value != "v2" || ld.Value() != "v2" {
		t.Fatalf("after the late Proclaim the election says %q, the leadership %q; want v2 for both", info.Value, ld.Value())
	}
}

// A late command changes nothing after the hold was released: its token
// is gone.
func TestLateExtendAfterUnlockChangesNothing(t *testing.T) {
	ctx := context.Background()
	c, d := lateClient(t)
	name := lockName(t)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithTTL(30*time.Second))
	d.hold("31000")
	if err := l.Extend(ctx, 31*time.Second); err == nil {
		t.Fatal("the held Extend returned nil")
	}
	unlock(t, l)
	d.deliver(t)
	if left := pttl(t, keysOf(name).Lock); left > 0 {
		t.Fatalf("the late Extend brought the released lock back for %v", left)
	}
}

// An acquire given up on whose attempt reaches the server after the undo
// (finding 12) takes nothing: the undo buried its token first. Without
// that, the lock (or permit) stayed held by nobody for its TTL.
func TestLateAcquireAfterUndoTakesNothing(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"Mutex", "FairMutex", "Semaphore", "RWMutex"} {
		t.Run(kind, func(t *testing.T) {
			c, d := lateClient(t)
			name := lockName(t)
			try := map[string]func(*dlock.Client, time.Duration) (*dlock.Lease, error){
				"Mutex": func(c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.Mutex(name).TryLock(ctx, dlock.WithTTL(ttl))
				},
				"FairMutex": func(c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.FairMutex(name).TryLock(ctx, dlock.WithTTL(ttl))
				},
				"Semaphore": func(c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.Semaphore(name, 1).TryAcquire(ctx, 1, dlock.WithTTL(ttl))
				},
				"RWMutex": func(c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.RWMutex(name).TryLock(ctx, dlock.WithTTL(ttl))
				},
			}[kind]
			warm, err := try(c, time.Second) // the server has the script: the late EVALSHA runs
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, warm)
			d.hold("31000") // the attempt, by its TTL
			if _, err := try(c, 31*time.Second); err == nil {
				t.Fatal("the held acquire returned nil")
			}
			// The undo runs before the acquire returns (the server
			// answers at once); then the attempt lands.
			d.deliver(t)
			l, err := try(client(t), time.Second)
			if err != nil {
				t.Fatalf("the attempt that landed after its undo holds the %s for nobody: %v", kind, err)
			}
			unlock(t, l)
		})
	}
}

// An acquire that go-redis sent twice (the first copy's reply did not
// come within its ReadTimeout; the second copy took the lock) must not
// take it again when the first copy lands after the Unlock: the torture
// test saw a Mutex held, with a later fence, by the token of a lease whose
// Unlock had returned (seed 949190422, the late fault on the worker slot
// whose go-redis re-sends). The release buries the token first when an
// attempt took the driver's ResendAfter or more (Info), so the first copy
// takes nothing. Without that, the lock stayed held by nobody for its TTL.
func TestLateAcquireAfterUnlockTakesNothing(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"Mutex", "FairMutex", "Semaphore", "RWMutex", "RLock"} {
		t.Run(kind, func(t *testing.T) {
			d := &lateDriver{Driver: goRedisDriver(t, newRedis(t, srv)), resend: 20 * time.Millisecond}
			c, err := dlock.NewWithDriver(d)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			name := lockName(t)
			try := map[string]func(context.Context, *dlock.Client, time.Duration) (*dlock.Lease, error){
				"Mutex": func(ctx context.Context, c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.Mutex(name).Lock(ctx, dlock.WithTTL(ttl))
				},
				"FairMutex": func(ctx context.Context, c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.FairMutex(name).Lock(ctx, dlock.WithTTL(ttl))
				},
				"Semaphore": func(ctx context.Context, c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.Semaphore(name, 1).Acquire(ctx, 1, dlock.WithTTL(ttl))
				},
				"RWMutex": func(ctx context.Context, c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.RWMutex(name).Lock(ctx, dlock.WithTTL(ttl))
				},
				"RLock": func(ctx context.Context, c *dlock.Client, ttl time.Duration) (*dlock.Lease, error) {
					return c.RWMutex(name).RLock(ctx, dlock.WithTTL(ttl))
				},
			}[kind]
			warm, err := try(ctx, c, time.Second) // the server has the script: the late EVALSHA runs
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, warm)
			d.hold("31000") // the attempt, by its TTL
			l, err := try(ctx, c, 31*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			unlock(t, l)
			d.deliver(t) // the first copy lands
			other := client(t)
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if kind == "RLock" { // a writer, which a reader held by nobody would keep waiting
				l, err = other.RWMutex(name).Lock(short, dlock.WithTTL(time.Second))
			} else {
				l, err = try(short, other, time.Second)
			}
			if err != nil {
				t.Fatalf("the first copy of an acquire sent twice, landed after the Unlock, holds the %s for nobody: %v", kind, err)
			}
			unlock(t, l)
		})
	}
}

// An Unlock that go-redis sends twice (its reply lost, the server runs
// both copies) reports the release it made, not ErrNotHeld: alone, when
// the release hands the lock to a waiter (which moves the fence on), and
// when another lock takes a fence between the two copies (the counter is
// shared), on every kind of hold (unlock.lua's fence and receipt;
// rw_unlock.lua's and sem_release.lua's receipt) but the one said below.
func TestUnlockSentTwiceReportsDone(t *testing.T) {
	ctx := context.Background()
	type kind struct {
		take  func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
		queue string // the waiters' queue key, after the lock key
	}
	kinds := map[string]kind{
		"Mutex": {func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Mutex(name).Lock(ctx)
		}, ":queue"},
		"Semaphore": {func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Semaphore(name, 1).Acquire(ctx, 1)
		}, ":sem:queue"},
		"RWMutex.read": {func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.RWMutex(name).RLock(ctx)
		}, ":rw:queue"},
		"RWMutex.write": {func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.RWMutex(name).Lock(ctx)
		}, ":rw:queue"},
	}
	for kn, k := range kinds {
		for _, waiter := range []bool{false, true} {
			for _, busy := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/waiter=%v/busy=%v", kn, waiter, busy), func(t *testing.T) {
					if busy && kn == "Mutex" && !waiter {
						// A Mutex release nobody waits for leaves no receipt (a
						// sorted-set write per release cost 40% more server CPU
						// at 16 goroutines); its copy answers done only while the
						// shared fence counter has not moved: here it has.
						t.Skip("known: a Mutex release sent again after another lock took a fence reports not held")
					}
					c, d := lateClient(t)
					name := lockName(t)
					first, err := k.take(ctx, c, name) // the server has the scripts
					if err != nil {
						t.Fatal(err)
					}
					unlock(t, first)
					l, err := k.take(ctx, c, name)
					if err != nil {
						t.Fatal(err)
					}
					got := make(chan error, 1)
					if waiter {
						other := client(t)
						go func() {
							bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
							defer cancel()
							// A writer waits for a read hold too.
							take := k.take
							if kn == "RWMutex.read" {
								take = kinds["RWMutex.write"].take
							}
							w, err := take(bounded, other, name)
							if err == nil {
								err = w.Unlock(ctx)
							}
							got <- err
						}()
						waitFor(t, "the waiter queued", func() bool {
							n, _ := newRedis(t, srv).ZCard(ctx, keysOf(name).Lock+k.queue).Result()
							return n == 1
						})
					}
					d.mu.Lock()
					d.twice = true
					if busy {
						other := client(t)
						d.between = func() { unlock(t, mustLock(t, other.Mutex(name+"/other"), ctx)) }
					}
					d.mu.Unlock()
					d.hold(l.Token(), "0") // the final release
					if err := l.Unlock(ctx); err != nil {
						t.Fatalf("Unlock sent twice: %v", err)
					}
					if waiter {
						if err := <-got; err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		}
	}
}
