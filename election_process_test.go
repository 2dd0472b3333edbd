package dlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// helperObserve prints "state <term> <value>" for every state Observe
// sends, until it is killed.
func helperObserve(ctx context.Context, e *dlock.Election) error {
	for info := range e.Observe(ctx) {
		fmt.Printf("state %d %s\n", info.Term, info.Value)
	}
	return nil
}

// helperLead reads commands on stdin: "campaign <value>" (prints
// "leading <term>"), "proclaim <value>" ("proclaimed") and "resign"
// ("resigned").
func helperLead(ctx context.Context, e *dlock.Election) error {
	var ld *dlock.Leadership
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch verb {
		case "campaign":
			if ld, err = e.Campaign(ctx, arg); err == nil {
				fmt.Printf("leading %d\n", ld.Term())
			}
		case "proclaim":
			if err = ld.Proclaim(ctx, arg); err == nil {
				fmt.Println("proclaimed")
			}
		case "resign":
			if err = ld.Resign(ctx); err == nil {
				fmt.Println("resigned")
			}
		}
		if err != nil {
			return err
		}
	}
	return sc.Err()
}

// Observers in several processes see the same states in the same order —
// elected, proclaimed, nobody after a resignation, nobody after the
// leader's process is killed (its lease runs out), a later leader — and
// terms increase strictly.
func TestElectionObserversAcrossProcesses(t *testing.T) {
	name := lockName(t)
	env := []string{addrEnv + "=" + srv.Addr(), nameEnv + "=" + name, ttlEnv + "=1s"}
	var observers []*helper
	for range 3 {
		observers = append(observers, startHelper(t, "observe", env...))
	}
	// want checks that every observer's next state is term and value.
	want := func(what string, term int64, value string) {
		t.Helper()
		for i, o := range observers {
			f := strings.Fields(o.expect(t, "state", 10*time.Second))
			got, _ := strconv.ParseInt(f[1], 10, 64)
			if v := strings.Join(f[2:], " "); got != term || v != value {
				t.Fatalf("observer %d, %s: state %d %q; want %d %q", i, what, got, v, term, value)
			}
		}
	}
	want("at first", 0, "")
	lead := startHelper(t, "lead", env...)
	lead.send(t, "campaign a")
	t1 := fenceOf(t, lead.expect(t, "leading", 10*time.Second))
	want("elected", t1, "a")
	lead.send(t, "proclaim b")
	lead.expect(t, "proclaimed", 10*time.Second)
	want("proclaimed", t1, "b")
	lead.send(t, "resign")
	lead.expect(t, "resigned", 10*time.Second)
	want("resigned", 0, "")

	lead.send(t, "campaign c")
	t2 := fenceOf(t, lead.expect(t, "leading", 10*time.Second))
	want("elected again", t2, "c")
	if err := lead.cmd.Process.Kill(); err != nil { // kill -9: no word
		t.Fatal(err)
	}
	killed := time.Now()
	want("after kill -9 of the leader", 0, "")
	t.Logf("observers saw nobody lead %v after the leader (1 s lease) was killed",
		time.Since(killed).Round(time.Millisecond))

	ld := campaign(t, client(t).Election(name), "d")
	want("a new leader", ld.Term(), "d")
	if err := ld.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("resigned", 0, "")
	if !(t1 < t2 && t2 < ld.Term()) {
		t.Fatalf("terms %d, %d, %d: not strictly increasing", t1, t2, ld.Term())
	}
}
