package dlock_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// electionGrant is the narrowest ACL an election's users need: the
// election's keys, its observers' channel, and the Clients' wake-up
// channels (docs/deployments.md).
func electionGrant(name string) []string {
	return []string{"~dlock:{" + name + "}:election*", "~dlock:fence*", "&dlock:{" + name + "}:election:*", "&dlock:wake:*", "+@all"}
}

// A user whose ACL grants exactly an election's keys and channels can
// Campaign, read who leads and observe it: the Clients' owner records
// (<prefix>:client:*, outside the election's keys) are not readable, and
// Leader and Observe report the leader without its Owner instead of
// failing (issue 23, finding 7).
func TestElectionNarrowACL(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	ctx := context.Background()
	name := lockName(t)
	var logs, leaderLogs syncBuffer
	leader := newClient(t, aclUser(t, s, "elector", electionGrant(name)...),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&leaderLogs, nil))))
	reader := newClient(t, aclUser(t, s, "elector", electionGrant(name)...),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))

	ld, err := leader.Election(name).Campaign(ctx, "v1")
	if err != nil {
		t.Fatalf("Campaign as the narrow user: %v", err)
	}
	e := reader.Election(name)
	info, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader as the narrow user: %v", err)
	}
	if info.Value != "v1" || info.Term != ld.Term() || info.Owner != nil {
		t.Fatalf("Leader: %+v; want v1 at term %d, no owner", info, ld.Term())
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := e.Observe(octx)
	if info := next(t, ch); info.Value != "v1" || info.Term != ld.Term() {
		t.Fatalf("observed %+v; want v1 at term %d", info, ld.Term())
	}
	if err := ld.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch); info.Value != "v2" {
		t.Fatalf("observed %+v; want v2", info)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch); info.Term != 0 {
		t.Fatalf("observed %+v after Resign; want nobody", info)
	}
	// A second term: the leader's Client does not try its record again.
	ld, err = leader.Election(name).Campaign(ctx, "v3")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Leader(ctx); err != nil || info.Value != "v3" {
		t.Fatalf("Leader: %+v, %v; want v3", info, err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Each Client says it once, naming the grant that would show the
	// owner: the reader (it reads the records), the leader (it writes
	// its own).
	for who, logs := range map[string]*syncBuffer{"reader": &logs, "leader": &leaderLogs} {
		if n := strings.Count(logs.String(), "~dlock:client:*"); n != 1 {
			t.Errorf("%s logged the missing grant ~dlock:client:* %d times, want once; logs:\n%s", who, n, logs.String())
		}
	}
}
