package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A leader's hold is one string since the mutex layout changed
// (lib_mutex.lua): dlock inspect, ls and unlock --force must read an
// election whose leader holds it, as they do a Mutex (CHANGELOG: "Inspect
// (and dlock inspect, ls, top) reads both layouts").
func TestAttackHeldElectionThroughTheCLI(t *testing.T) {
	const name = "primary"
	prefix := testPrefix(t)
	c := labelled(t, prefix, "leader-a")
	ld, err := c.Election(name, dlock.WithTTL(time.Minute)).Campaign(testCtx(t), "10.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"inspect", "--kind", "election", name}, {"inspect", name}, {"ls"}} {
		r := admin(prefix, cmd[0], cmd[1:]...)
		if r.code != exitOK || !strings.Contains(r.stdout, "primary") || !strings.Contains(r.stdout, "10.0.0.1:5432") {
			t.Errorf("dlock %s: code %d, want %d; stdout:\n%s\nstderr: %s", strings.Join(cmd, " "), r.code, exitOK, r.stdout, r.stderr)
		}
	}
	if r := admin(prefix, "unlock", "--force", "--kind", "election", name); r.code != exitOK {
		t.Fatalf("dlock unlock --force --kind election: code %d, want %d; stdout:\n%s\nstderr: %s", r.code, exitOK, r.stdout, r.stderr)
	}
	// freed: the holder learns at its next renewal (a third of the
	// TTL), Redis knows now
	if info, err := c.Inspect(testCtx(t), dlock.KindElection, name); err != nil || info.Held {
		t.Errorf("after unlock --force: %+v, %v; want nobody holding", info, err)
	}
	_ = ld.Resign(testCtx(t))
}

// An election's key that is a string but no hold (a name clash under the
// prefix) is still refused, and unlock --force leaves it alone.
func TestAttackElectionStringThatIsNoHold(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	rdb := testClient(t)
	key := keysFor(prefix, "clash").Lock + ":election"
	if err := rdb.Set(ctx, key, "somebody else's value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	for _, args := range [][]string{{"inspect", "--kind", "election", "clash"}, {"unlock", "--force", "--kind", "election", "clash"}} {
		r := admin(prefix, args[0], args[1:]...)
		if r.code != exitFail || !strings.Contains(r.stderr, "is a string, not a dlock election") {
			t.Errorf("%s of a string key: code %d, stderr %q", args, r.code, r.stderr)
		}
	}
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "somebody else's value" {
		t.Errorf("the key was changed: %q, %v", v, err)
	}
}

// TestAttackTerminalEscapesInReports: owner labels, hold labels and
// lock names that carry terminal escape sequences (clear the screen, set
// the window's title, a BEL) reach the operator's terminal through
// dlock deadlocks, ls and inspect: never as raw bytes, always quoted. A
// real two-party deadlock, broken by the detector, is what deadlocks
// reports.
func TestAttackTerminalEscapesInReports(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	const esc = "\x1b[2J\x1b]0;pwned\a"
	a, b := labelled(t, prefix, "a"+esc), labelled(t, prefix, "b"+esc)
	la, err := a.Mutex("x"+esc, dlock.WithLabel("hold"+esc)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(context.Background())
	lb, err := b.Mutex("y"+esc, dlock.WithLabel("hold"+esc)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(context.Background())
	errs := make(chan error, 2)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, w := range []struct {
		c    *dlock.Client
		held *dlock.Lease
		want string
	}{{a, la, "y" + esc}, {b, lb, "x" + esc}} {
		go func() {
			l, err := w.c.Mutex(w.want, dlock.WithLabel("wait"+esc)).Lock(w.held.Context(wctx))
			if err == nil {
				_ = l.Unlock(context.Background())
			}
			errs <- err
		}()
	}
	if err := <-errs; !errors.Is(err, dlock.ErrDeadlock) {
		t.Fatalf("the first wait to end: %v, want ErrDeadlock", err)
	}
	cancel()
	<-errs
	for _, cmd := range [][]string{{"deadlocks"}, {"ls"}, {"inspect", "x" + esc}, {"top", "--iterations", "1"}} {
		r := admin(prefix, cmd[0], cmd[1:]...)
		if r.code != exitOK {
			t.Errorf("dlock %q: code %d; stderr %s", cmd, r.code, r.stderr)
		}
		if strings.ContainsAny(r.stdout, "\x1b\a") {
			t.Errorf("dlock %q wrote raw escape bytes to the terminal:\n%q", cmd, r.stdout)
		}
		if !strings.Contains(r.stdout, `\x1b[2J\x1b]0;pwned\a`) {
			t.Errorf("dlock %q does not show the texts, quoted:\n%s", cmd, r.stdout)
		}
	}
}
