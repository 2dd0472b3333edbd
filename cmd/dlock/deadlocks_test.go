package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// cycleSnapshot is a snapshot with a two-party deadlock now (billing
// holds accounts and waits for ledger; audit holds ledger and waits for
// accounts; audit is the victim) and one broken ten minutes ago.
func cycleSnapshot(at time.Time) *dlock.Snapshot {
	mu := func(n string) dlock.LockRef { return dlock.LockRef{Kind: dlock.KindMutex, Name: n} }
	billing := dlock.Wait{Token: "aaaaaaaaaaaaaaaa0001", Since: at.Add(-3 * time.Second), For: []dlock.LockRef{mu("ledger")},
		Holds: []dlock.HeldLock{{LockRef: mu("accounts"), Token: "aaaaaaaaaaaaaaaa0000"}}, Label: "billing",
		Owner: &dlock.Owner{Host: "web-1", PID: 41, Program: "billingd"}}
	audit := dlock.Wait{Token: "bbbbbbbbbbbbbbbb0001", Since: at.Add(-2 * time.Second), For: []dlock.LockRef{mu("accounts")},
		Holds: []dlock.HeldLock{{LockRef: mu("ledger"), Token: "bbbbbbbbbbbbbbbb0000"}}}
	return &dlock.Snapshot{At: at,
		Locks: []*dlock.LockInfo{
			{Kind: dlock.KindMutex, Name: "accounts", Held: true, Holders: []dlock.Holder{{Token: "aaaaaaaaaaaaaaaa0000", Holds: 1}}},
			{Kind: dlock.KindMutex, Name: "ledger", Held: true, Holders: []dlock.Holder{{Token: "bbbbbbbbbbbbbbbb0000", Holds: 1}}},
			{Kind: dlock.KindMutex, Name: "quiet", Held: true, Holders: []dlock.Holder{{Token: "cccccccccccccccc0000", Holds: 1}}},
		},
		Waits:     []dlock.Wait{billing, audit},
		Deadlocks: []dlock.Deadlock{{Waits: []dlock.Wait{billing, audit}, Victim: audit.Token, At: at}},
		Broken:    []dlock.Deadlock{{Waits: []dlock.Wait{billing, audit}, Victim: billing.Token, At: at.Add(-10 * time.Minute)}},
	}
}

// TestDeadlocksReport: each wait of the cycle on a line — who, what it
// holds, what it waits for — the victim named; then the broken ones.
func TestDeadlocksReport(t *testing.T) {
	var b strings.Builder
	writeDeadlocks(&b, cycleSnapshot(time.Now()), "shop")
	out := b.String()
	for _, want := range []string{
		`1 deadlock now under prefix "shop"`,
		`"billing" web-1/41 billingd token aaaaaaaaaaaa… holds mutex "accounts", waits for mutex "ledger" (3s)`,
		`token bbbbbbbbbbbb… holds mutex "ledger", waits for mutex "accounts" (2s)  <- victim`,
		"victim: token bbbbbbbbbbbb…",
		"1 deadlock broken in the last hour",
		`"billing" web-1/41 billingd token aaaaaaaaaaaa… gave up`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	writeDeadlocks(&b, &dlock.Snapshot{}, "shop")
	if !strings.HasPrefix(b.String(), `no deadlock now under prefix "shop"`) || strings.Contains(b.String(), "broken") {
		t.Errorf("no deadlocks: %q", b.String())
	}
}

// TestDeadlocksJSON: the schema's fields, lists never null.
func TestDeadlocksJSON(t *testing.T) {
	b, err := json.Marshal(deadlocksOf(cycleSnapshot(time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Deadlocks []struct {
			Victim string `json:"victim"`
			Waits  []struct {
				Token string `json:"token"`
				For   []struct{ Kind, Name string }
				Holds []struct{ Kind, Name, Token string }
				Owner *struct{ Host string }
			} `json:"waits"`
		} `json:"deadlocks"`
		Broken []json.RawMessage `json:"broken"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Deadlocks) != 1 || got.Deadlocks[0].Victim != "bbbbbbbbbbbbbbbb0001" || len(got.Deadlocks[0].Waits) != 2 ||
		got.Deadlocks[0].Waits[0].For[0].Name != "ledger" || got.Deadlocks[0].Waits[0].Holds[0].Token != "aaaaaaaaaaaaaaaa0000" ||
		got.Deadlocks[0].Waits[0].Owner.Host != "web-1" || got.Deadlocks[0].Waits[1].Owner != nil || len(got.Broken) != 1 {
		t.Errorf("JSON %s", b)
	}
	empty, _ := json.Marshal(deadlocksOf(&dlock.Snapshot{}))
	if string(empty) != `{"deadlocks":[],"broken":[]}` {
		t.Errorf("no deadlocks: %s", empty)
	}
}

// TestDeadlocksCommand: on the server, with no deadlock, the command
// says so and exits 0; --json gives the empty lists.
func TestDeadlocksCommand(t *testing.T) {
	prefix := testPrefix(t)
	must(t, admin(prefix, "deadlocks"), exitOK, `no deadlock now under prefix "`+prefix+`"`)
	r := admin(prefix, "deadlocks", "--json")
	var got deadlocksJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != exitOK || err != nil || got.Deadlocks == nil || got.Broken == nil {
		t.Errorf("--json: code %d, %v, %q", r.code, err, r.stdout)
	}
}

// TestTopMarksDeadlocks: top's frame says a deadlock is there, and the
// locks of its cycle come first, marked DEADLOCK; the others are not.
func TestTopMarksDeadlocks(t *testing.T) {
	s := cycleSnapshot(time.Now())
	cur := &snapshot{at: time.Now(), locks: s.Locks, dead: deadlockedLocks(s), deadlocks: len(s.Deadlocks)}
	frame := renderTop(topView{prefix: "shop", interval: time.Second}, nil, cur)
	if !strings.Contains(frame, "DEADLOCK: 1 cycle of waits now") {
		t.Errorf("frame lacks the deadlock line:\n%s", frame)
	}
	var rows []string
	for _, line := range strings.Split(frame, "\n") {
		if strings.HasPrefix(line, "mutex ") {
			rows = append(rows, line)
		}
	}
	if len(rows) != 3 || !strings.Contains(rows[0], "DEADLOCK") || !strings.Contains(rows[1], "DEADLOCK") ||
		strings.Contains(rows[2], "DEADLOCK") || !strings.Contains(rows[2], "quiet") {
		t.Errorf("rows:\n%s", strings.Join(rows, "\n"))
	}
}
