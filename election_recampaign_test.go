package dlock_test

import (
	"context"
	"testing"
	"time"
)

// A second Campaign from a Client that leads the election already must
// not wait for its own leadership (etcd's TestElectionSessionRecampaign
// guards the same deadlock): it proclaims the new value and returns the
// leadership.
func TestElectionRecampaignProclaims(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	name := lockName(t)
	ld, err := c.Election(name).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ld.Resign(ctx) }()
	bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	again, err := c.Election(name).Campaign(bounded, "v2")
	if err != nil {
		t.Fatalf("second Campaign of the leading Client: %v", err)
	}
	if again.Term() != ld.Term() || again.Value() != "v2" {
		t.Fatalf("second Campaign: term %d value %q; want the leadership's term %d and v2", again.Term(), again.Value(), ld.Term())
	}
	info, err := client(t).Election(name).Leader(ctx)
	if err != nil || info.Value != "v2" {
		t.Fatalf("Leader: %+v, %v; want v2", info, err)
	}
	if err := again.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Once it resigned, a Campaign is a new candidate again.
	next, err := c.Election(name).Campaign(bounded, "v3")
	if err != nil {
		t.Fatal(err)
	}
	if next.Term() <= ld.Term() {
		t.Fatalf("a Campaign after Resign got term %d, not above %d", next.Term(), ld.Term())
	}
	_ = next.Resign(ctx)
}
