package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// electionKeys are the Redis keys of the Election called name.
func electionKeys(name string) (lock, queue, alive string) {
	lock = keysOf(name).Lock + ":election"
	return lock, lock + ":queue", lock + ":alive"
}

// next receives the observer's next state, within a bound.
func next(t *testing.T, ch <-chan dlock.LeaderInfo) dlock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed")
		}
		return info
	case <-time.After(10 * time.Second):
		t.Fatal("no state from Observe within 10s")
	}
	return dlock.LeaderInfo{}
}

func campaign(t *testing.T, e *dlock.Election, value string) *dlock.Leadership {
	t.Helper()
	ld, err := e.Campaign(context.Background(), value)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", value, err)
	}
	return ld
}

func TestElectionLeaderProclaimResign(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	c := client(t, dlock.WithOwnerLabel("primary"))
	e := c.Election(name)
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	ld := campaign(t, e, "10.0.0.1:8080")
	if ld.Err() != nil || ld.Value() != "10.0.0.1:8080" || ld.Term() <= 0 {
		t.Fatalf("leadership: err %v value %q term %d", ld.Err(), ld.Value(), ld.Term())
	}
	// Another Client reads who leads.
	other := client(t).Election(name)
	info, err := other.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Value != "10.0.0.1:8080" || info.Term != ld.Term() || info.TTL <= 0 || info.Since.IsZero() {
		t.Fatalf("Leader: %+v; want the value and term %d, a TTL and a start", info, ld.Term())
	}
	if info.Owner == nil || info.Owner.Label != "primary" {
		t.Fatalf("Leader's owner %+v; want the leader's Client's record", info.Owner)
	}
	if err := ld.Proclaim(ctx, "10.0.0.2:8080"); err != nil {
		t.Fatal(err)
	}
	if info, _ := other.Leader(ctx); info.Value != "10.0.0.2:8080" || info.Term != ld.Term() || ld.Value() != "10.0.0.2:8080" {
		t.Fatalf("after Proclaim: Leader %+v, Value %q", info, ld.Value())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ld.Err(), dlock.ErrUnlocked) {
		t.Fatalf("Err after Resign: %v", ld.Err())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v; want what the first returned (nil)", err)
	}
	if err := ld.Proclaim(ctx, "x"); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrUnlocked) {
		t.Fatalf("Proclaim after Resign: %v; want ErrNotHeld and ErrUnlocked", err)
	}
	if _, err := other.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	// Nothing of the election is left but its term counter.
	lock, queue, alive := electionKeys(name)
	admin := newRedis(t, srv)
	if n := admin.Exists(ctx, lock, queue, alive).Val(); n != 0 {
		t.Fatalf("%d keys of the election left after Resign", n)
	}
}

// Terms increase strictly, and candidates lead in the order they came.
func TestElectionTermsAndArrivalOrder(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	_, queue, _ := electionKeys(name)
	qlen := queueLenOf(newRedis(t, srv), queue)
	first := campaign(t, client(t).Election(name), "first")
	const n = 4
	won := make(chan *dlock.Leadership, n)
	for i := range n {
		e := client(t).Election(name)
		go func() {
			ld, err := e.Campaign(ctx, string(rune('a'+i)))
			if err != nil {
				t.Error(err)
			}
			won <- ld
		}()
		waitFor(t, "the candidate to queue", func() bool { return qlen() == int64(i+1) })
	}
	reader := client(t).Election(name)
	if info, err := reader.Leader(ctx); err != nil || info.Value != "first" {
		t.Fatalf("Leader after an uncontended Campaign: %+v, %v; want the value its attempt recorded", info, err)
	}
	term := first.Term()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ld := <-won
		if ld == nil {
			t.FailNow()
		}
		if want := string(rune('a' + i)); ld.Value() != want {
			t.Fatalf("leader %d is %q; want %q (arrival order)", i, ld.Value(), want)
		}
		// handed the lock by a release, it recorded its value itself
		if info, err := reader.Leader(ctx); err != nil || info.Value != ld.Value() || info.Term != ld.Term() {
			t.Fatalf("Leader after a hand-over: %+v, %v; want %q in term %d", info, err, ld.Value(), ld.Term())
		}
		if ld.Term() <= term {
			t.Fatalf("term %d after %d", ld.Term(), term)
		}
		term = ld.Term()
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Observers see the first state, then elected, proclaimed, and nobody
// after a resignation, a force-unlock, and a leader's expiry.
func TestElectionObserve(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := lockName(t)
	obs := client(t).Election(name).Observe(ctx)
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("first state %+v; want nobody", info)
	}
	e := client(t).Election(name)
	ld := campaign(t, e, "v1")
	if info := next(t, obs); info.Term != ld.Term() || info.Value != "v1" {
		t.Fatalf("after Campaign: %+v", info)
	}
	if err := ld.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if info := next(t, obs); info.Term != ld.Term() || info.Value != "v2" {
		t.Fatalf("after Proclaim: %+v", info)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("after Resign: %+v; want nobody", info)
	}

	// An operator's force-unlock.
	ld = campaign(t, e, "v3")
	if info := next(t, obs); info.Term != ld.Term() {
		t.Fatalf("after Campaign: %+v", info)
	}
	admin := client(t)
	if _, err := admin.ForceUnlock(ctx, dlock.KindElection, name); err != nil {
		t.Fatal(err)
	}
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("after ForceUnlock: %+v; want nobody", info)
	}
	_ = ld.Resign(ctx)

	// A leader that dies without a word: its fixed lease runs out.
	crashed, crash := crashingClient(t)
	ld, err := crashed.Election(name, dlock.WithLease(300*time.Millisecond)).Campaign(ctx, "v4")
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, obs); info.Term != ld.Term() {
		t.Fatalf("after Campaign: %+v", info)
	}
	crash()
	if info := next(t, obs); info.Term != 0 {
		t.Fatalf("after the leader's lease ran out: %+v; want nobody", info)
	}
	cancel()
	for range obs { // closed when ctx ends
	}
}

// What an election costs in round trips: Campaign one when nobody leads
// (the lock and the value in one script; two before issue 26), Resign one; an observer reads once per
// change it is told of (plus the leader's owner record when the term is
// new), and, while a leader renews its lease, once per expiry it was
// told of — never on a fixed interval.
func TestElectionRoundTrips(t *testing.T) {
	ctx := context.Background()
	c, rec := countedClient(t)
	e := c.Election(lockName(t), dlock.WithTTL(time.Second))
	ld := campaign(t, e, "warm-up") // loads the scripts
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()
	ld = campaign(t, e, "v")
	if calls := rec.take(); len(calls) != 1 {
		t.Fatalf("uncontended Campaign sent %v; want one round trip", calls)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if calls := rec.take(); len(calls) != 1 {
		t.Fatalf("Resign sent %v; want one round trip", calls)
	}

	// An observer of an election nobody leads reads at first (and when its
	// subscription is confirmed), then sleeps until told.
	oc, orec := countedClient(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := oc.Election(e.Name()).Observe(octx)
	next(t, obs)
	waitFor(t, "the observer's reads at start", func() bool { return len(orec.take()) >= 1 })
	time.Sleep(time.Second) // an idle second: counts are checked, not timing
	if calls := orec.take(); len(calls) > 2 {
		t.Fatalf("an observer of an idle election sent %v in a second; want no polling", calls)
	}
	// A leader with a 1 s lease renewed for 3 s: the observer reads when
	// told, then about once per lease (the renewals keep moving the
	// expiry), not more.
	ld = campaign(t, e, "w")
	if info := next(t, obs); info.Value != "w" {
		t.Fatalf("observed %+v", info)
	}
	orec.take()
	time.Sleep(3 * time.Second)
	calls := orec.take()
	t.Logf("an observer of a renewed 1 s leader: %d round trips in 3 s", len(calls))
	if len(calls) > 6 {
		t.Fatalf("an observer of a renewed 1 s leader sent %d round trips in 3 s: %v; want about one a lease", len(calls), calls)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
