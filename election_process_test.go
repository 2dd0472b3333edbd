package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
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
// "leading <term>"), "proclaim <value>" ("proclaimed", or "refused"
// once the leadership is lost), "check" ("err <Err()>") and "resign"
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
			} else if errors.Is(err, dlock.ErrNotHeld) {
				fmt.Println("refused")
				err = nil
			}
		case "check":
			fmt.Printf("err %v\n", ld.Err())
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

// A leader paused (SIGSTOP) past its lease is deposed: the next candidate
// leads with a higher term while it sleeps; resumed, it is told it lost
// the leadership, and its Proclaim is refused — the value observers see
// stays the new leader's.
func TestElectionPausedLeaderIsDeposed(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	lead := startHelper(t, "lead", addrEnv+"="+srv.Addr(), nameEnv+"="+name, ttlEnv+"=500ms")
	lead.send(t, "campaign old")
	t1 := fenceOf(t, lead.expect(t, "leading", 10*time.Second))
	if err := lead.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e := client(t).Election(name)
	ld := campaign(t, e, "new") // waits out the paused leader's lease
	if ld.Term() <= t1 {
		t.Fatalf("new leader's term %d after %d", ld.Term(), t1)
	}
	if err := lead.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	lead.send(t, "check")
	if line := lead.expect(t, "err", 10*time.Second); !strings.Contains(line, "lease lost") {
		t.Fatalf("the resumed leader says %q; want its leadership lost", line)
	}
	lead.send(t, "proclaim stale")
	lead.expect(t, "refused", 10*time.Second)
	info, err := e.Leader(ctx)
	if err != nil || info.Value != "new" || info.Term != ld.Term() {
		t.Fatalf("Leader: %+v, %v; want the new leader", info, err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
