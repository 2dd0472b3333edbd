package dlock_test

// More commands sent twice (TestSentTwiceAnswersAsOnce's kin): a client
// library sends a call again when it lost the reply, and the server may
// run both copies. Each test has the server run two copies of one kind of
// command, sometimes with another Client's step between them, and checks
// that the second copy answers as the first did and changes nothing more.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// twiceDriver runs every command that pick chooses twice, back to back
// (as the server does when go-redis sends a call again after a lost
// reply), running between once between the first pair's copies, and
// answers the second copy's reply. The commands a Dedicated connection
// sends in one pipeline (a MULTI ... EXEC) are sent twice as a whole.
type twiceDriver struct {
	driver.Driver
	mu      sync.Mutex
	pick    func(args []any) bool
	between func()
	pairs   [][2]driver.Reply // the replies of each command's two copies
}

func (d *twiceDriver) chosen(cmds []driver.Command) (bool, func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pick == nil || !slices.ContainsFunc(cmds, func(c driver.Command) bool { return d.pick(c.Args) }) {
		return false, nil
	}
	b := d.between
	d.between = nil
	return true, b
}

func (d *twiceDriver) record(first, second driver.Reply) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pairs = append(d.pairs, [2]driver.Reply{first, second})
}

func (d *twiceDriver) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	ok, between := d.chosen([]driver.Command{cmd})
	if !ok {
		return d.Driver.Do(ctx, cmd)
	}
	first := d.Driver.Do(ctx, cmd)
	if first.Err != nil && strings.HasPrefix(first.Err.Error(), "NOSCRIPT") {
		d.mu.Lock()
		d.between = between // the EVAL that follows is the command
		d.mu.Unlock()
		return first
	}
	if between != nil {
		between()
	}
	second := d.Driver.Do(ctx, cmd)
	d.record(first, second)
	return second
}

func (d *twiceDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	ok, between := d.chosen(cmds)
	if !ok {
		return d.Driver.Pipeline(ctx, cmds)
	}
	first := d.Driver.Pipeline(ctx, cmds)
	if between != nil {
		between()
	}
	second := d.Driver.Pipeline(ctx, cmds)
	for i := range first {
		d.record(first[i], second[i])
	}
	return second
}

func (d *twiceDriver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	return d.Driver.Dedicated(ctx, key, func(conn driver.Conn) error {
		return fn(twiceConn{conn, d})
	})
}

type twiceConn struct {
	driver.Conn
	d *twiceDriver
}

func (c twiceConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	ok, between := c.d.chosen(cmds)
	if !ok {
		return c.Conn.Pipeline(ctx, cmds)
	}
	first := c.Conn.Pipeline(ctx, cmds)
	if between != nil {
		between()
	}
	second := c.Conn.Pipeline(ctx, cmds)
	c.d.record(first[len(first)-1], second[len(second)-1])
	return second
}

// arm makes d send twice every command that pick chooses from now on.
func (d *twiceDriver) arm(pick func(args []any) bool, between func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pick, d.between, d.pairs = pick, between, nil
}

// check fails the test unless some command was sent twice and each copy
// answered as the first did; it disarms d.
func (d *twiceDriver) check(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pick = nil
	if len(d.pairs) == 0 {
		t.Fatal("no command was sent twice: the test shows nothing")
	}
	for _, p := range d.pairs {
		if fmt.Sprint(p[0].Val, p[0].Err) != fmt.Sprint(p[1].Val, p[1].Err) {
			t.Errorf("a copy answered %v (%v); the first copy answered %v (%v)", p[1].Val, p[1].Err, p[0].Val, p[0].Err)
		}
	}
}

// scriptOn chooses the script calls on name's keys.
func scriptOn(name string) func(args []any) bool {
	return func(args []any) bool {
		if len(args) == 0 || (fmt.Sprint(args[0]) != "EVALSHA" && fmt.Sprint(args[0]) != "EVAL") {
			return false
		}
		return slices.ContainsFunc(args, func(a any) bool {
			s, ok := a.(string)
			return ok && strings.Contains(s, "{"+name+"}")
		})
	}
}

// commandOn chooses the commands named word (a MULTI ... EXEC's inner
// command too) on name's keys.
func commandOn(word, name string) func(args []any) bool {
	return func(args []any) bool {
		if len(args) < 2 || !strings.EqualFold(fmt.Sprint(args[0]), word) {
			return false
		}
		s, ok := args[1].(string)
		return ok && strings.Contains(s, "{"+name+"}")
	}
}

// twiceClient is a Client on the shared server whose commands the
// returned twiceDriver can send twice.
func twiceClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *twiceDriver) {
	t.Helper()
	d := &twiceDriver{Driver: dlock.GoRedisDriver(newRedis(t, srv))}
	c, err := dlock.NewWithDriver(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, d
}

// holder is one hold of a kind, as the tests below take it.
type holder struct {
	alive func() error // nil while it still holds
	stop  func()
}

// holds takes, per kind, a hold that nobody else may have meanwhile.
var holds = map[string]struct {
	kind dlock.Kind
	take func(ctx context.Context, c *dlock.Client, name, who string) (holder, error)
}{
	"Mutex": {dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name, _ string) (holder, error) {
		return leaseHolder(c.Mutex(name).Lock(ctx))
	}},
	"FairMutex": {dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name, _ string) (holder, error) {
		return leaseHolder(c.FairMutex(name).Lock(ctx))
	}},
	"RWMutex.write": {dlock.KindRWMutex, func(ctx context.Context, c *dlock.Client, name, _ string) (holder, error) {
		return leaseHolder(c.RWMutex(name).Lock(ctx))
	}},
	"Semaphore": {dlock.KindSemaphore, func(ctx context.Context, c *dlock.Client, name, _ string) (holder, error) {
		return leaseHolder(c.Semaphore(name, 1).Acquire(ctx, 1))
	}},
	"Election": {dlock.KindElection, func(ctx context.Context, c *dlock.Client, name, who string) (holder, error) {
		e := c.Election(name)
		ld, err := e.Campaign(ctx, who)
		if err != nil {
			return holder{}, err
		}
		return holder{
			alive: func() error {
				info, err := e.Leader(context.Background())
				if err == nil && info.Value != who {
					err = fmt.Errorf("the election says %q leads, not %q", info.Value, who)
				}
				return cmpErr(err, ld.Err())
			},
			stop: func() { _ = ld.Resign(context.Background()) },
		}, nil
	}},
}

func leaseHolder(l *dlock.Lease, err error) (holder, error) {
	if err != nil {
		return holder{}, err
	}
	return holder{
		alive: func() error {
			_, err := l.TTL(context.Background())
			return err
		},
		stop: func() { _ = l.Unlock(context.Background()) },
	}, nil
}

func cmpErr(errs ...error) error { return errors.Join(errs...) }

// A ForceUnlock sent twice, with another owner taking the freed lock
// between the copies: the copy must not free the new owner's lock (it
// answers as the first copy did, and the new owner still holds). For every
// kind's force script (force.lua, also an Election's; rw_force.lua;
// sem_force.lua).
func TestForceSentTwiceSparesTheNextOwner(t *testing.T) {
	for kind, h := range holds {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			name := lockName(t)
			old, err := h.take(ctx, client(t), name, "old")
			if err != nil {
				t.Fatal(err)
			}
			defer old.stop()
			c, d := twiceClient(t)
			var next holder
			var nextErr error
			d.arm(scriptOn(name), func() { next, nextErr = h.take(ctx, client(t), name, "next") })
			if _, err := c.ForceUnlock(ctx, h.kind, name); err != nil {
				t.Fatalf("ForceUnlock sent twice: %v", err)
			}
			d.check(t)
			if nextErr != nil {
				t.Fatalf("the next owner, between the copies: %v", nextErr)
			}
			defer next.stop()
			if err := next.alive(); err != nil {
				t.Fatalf("a copy of ForceUnlock that ran after another owner took the lock freed it: %v", err)
			}
		})
	}
}
