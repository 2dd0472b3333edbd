package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A Campaign made through a Leadership's Context (the leader campaigning
// again: etcd's TestElectionSessionRecampaign) never waits on itself: it
// re-enters the leadership, proclaims its value, and returns at once with
// the same term. The term lasts until both leaderships have resigned
// (issue 23, finding 6).
func TestElectionNestedCampaignProclaims(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	e := client(t).Election(name)
	outer := campaign(t, e, "v1")
	obs := client(t).Election(name)
	ch := obs.Observe(ctx)
	if info := next(t, ch); info.Value != "v1" {
		t.Fatalf("observed %+v; want v1", info)
	}

	// Bounded: on a Client that waits on itself this fails with a timeout.
	cctx, cancel := context.WithTimeout(outer.Context(ctx), 2*time.Second)
	defer cancel()
	inner, err := e.Campaign(cctx, "v2")
	if err != nil {
		t.Fatalf("Campaign through the leadership's context: %v", err)
	}
	if inner.Term() != outer.Term() {
		t.Fatalf("nested Campaign: term %d; want the leadership's %d", inner.Term(), outer.Term())
	}
	if inner.Value() != "v2" || outer.Value() != "v2" {
		t.Fatalf("values %q (inner), %q (outer); want v2 for both: one leader, one value", inner.Value(), outer.Value())
	}
	info, err := obs.Leader(ctx)
	if err != nil || info.Value != "v2" || info.Term != outer.Term() {
		t.Fatalf("Leader: %+v, %v; want v2 at term %d", info, err, outer.Term())
	}
	if info := next(t, ch); info.Value != "v2" || info.Term != outer.Term() {
		t.Fatalf("observed %+v; want v2 at term %d", info, outer.Term())
	}

	// Proclaim through either changes the one value.
	if err := outer.Proclaim(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	if inner.Value() != "v3" {
		t.Fatalf("inner value %q after the outer proclaimed v3", inner.Value())
	}

	// The inner resigns: the outer still leads, nobody else can win.
	if err := inner.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if outer.Err() != nil {
		t.Fatalf("outer leadership ended with the inner: %v", outer.Err())
	}
	tctx, tcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer tcancel()
	if _, err := client(t).Election(name).Campaign(tctx, "other"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another candidate while the outer leads: %v; want ErrNotObtained", err)
	}
	if err := outer.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after both resigned: %v; want ErrNoLeader", err)
	}
}

// A nested Campaign through a leadership that has ended does not wait
// either: it is refused with ErrNotHeld.
func TestElectionNestedCampaignAfterResign(t *testing.T) {
	ctx := context.Background()
	e := client(t).Election(lockName(t))
	ld := campaign(t, e, "v1")
	lctx := ld.Context(ctx)
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(lctx), 2*time.Second)
	defer cancel()
	if _, err := e.Campaign(cctx, "v2"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Campaign through an ended leadership's context: %v; want ErrNotHeld", err)
	}
}

// A Campaign from the same Client, not through the leadership's context,
// is another candidate: a Client is shared by a program's goroutines, as a
// Redis client is, and is not a candidate's identity. It waits its turn,
// and wins when the leader resigns.
func TestElectionSameClientIsAnotherCandidate(t *testing.T) {
	ctx := context.Background()
	e := client(t).Election(lockName(t))
	ld := campaign(t, e, "v1")
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := e.Campaign(cctx, "v2"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Campaign of the same Client: %v; want it to wait (ErrNotObtained, DeadlineExceeded)", err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := campaign(t, e, "v2")
	if next.Term() <= ld.Term() {
		t.Fatalf("term %d after %d", next.Term(), ld.Term())
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
