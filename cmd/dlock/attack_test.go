package main

import (
	"context"
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
