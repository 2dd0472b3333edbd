package deadlock

import (
	"context"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// world is a graph in memory: which tokens hold each lock, and the waits.
// The detector's reads of Redis are tested on real servers (the root's
// deadlock tests); this is the rule alone.
type world struct {
	holders map[string][]Holder // lock name -> holders
	sem     map[string]int64    // lock name -> free permits (a Semaphore)
	waits   map[string]*Wait    // held token -> wait
	queued  map[string][]string // lock name -> the waits queued for it
	reads   int
}

func (w *world) State(_ context.Context, l Lock) (State, error) {
	w.reads++
	free, sem := w.sem[l.Name]
	return State{Holders: w.holders[l.Name], Waiters: w.queued[l.Name], Semaphore: sem, Free: free}, nil
}

func (w *world) WaitOf(_ context.Context, token string) (*Wait, error) {
	w.reads++
	return w.waits[token], nil
}

func newWorld() *world {
	return &world{holders: map[string][]Holder{}, sem: map[string]int64{}, waits: map[string]*Wait{}, queued: map[string][]string{}}
}

// party adds a wait: id holds the locks held (its token for each:
// id+"@"+lock) and waits for the lock wants.
func (w *world) party(id string, since int64, wants string, held ...string) *Wait {
	wt := &Wait{Token: id, Since: since, For: []Lock{{Kind: "mutex", Name: wants}}}
	w.queued[wants] = append(w.queued[wants], id)
	for _, l := range held {
		t := id + "@" + l
		wt.Holds = append(wt.Holds, Held{Lock: Lock{Kind: "mutex", Name: l}, Token: t})
		w.holders[l] = append(w.holders[l], Holder{Token: t, Permits: 1})
		w.waits[t] = wt
	}
	return wt
}

func victims(t *testing.T, w *world, ws ...*Wait) []string {
	t.Helper()
	var out []string
	for _, x := range ws {
		_, v, err := Find(context.Background(), w, x)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil && v.Token == x.Token {
			out = append(out, x.Token)
		}
	}
	return out
}

func TestTwoPartyCycleOneVictim(t *testing.T) {
	w := newWorld()
	a := w.party("a", 1, "y", "x")
	b := w.party("b", 2, "x", "y")
	cyc, v, _ := Find(context.Background(), w, a)
	if len(cyc) != 2 || v.Token != "b" {
		t.Fatalf("cycle %v victim %v, want a and b, b the victim", cyc, v)
	}
	if got := victims(t, w, a, b); len(got) != 1 || got[0] != "b" {
		t.Fatalf("victims %v, want [b]", got)
	}
}

func TestChainIsNoDeadlock(t *testing.T) {
	w := newWorld()
	a := w.party("a", 1, "y", "x")
	w.party("b", 2, "z", "y")
	w.holders["z"] = []Holder{{Token: "running"}}
	if cyc, _, _ := Find(context.Background(), w, a); cyc != nil {
		t.Fatalf("a chain ending in a running holder reported: %v", cyc)
	}
}

func TestBlockedByACycleElsewhereIsNotAVictim(t *testing.T) {
	w := newWorld()
	a := w.party("a", 9, "y", "x") // waits on the b-c cycle, is in none
	b := w.party("b", 1, "z", "y")
	c := w.party("c", 2, "y", "z")
	if got := victims(t, w, a, b, c); len(got) != 1 || got[0] != "c" {
		t.Fatalf("victims %v, want [c]", got)
	}
}

func TestSemaphoreServedByARunningHolder(t *testing.T) {
	w := newWorld()
	a := w.party("a", 1, "s", "x")
	a.For[0].Kind = "semaphore"
	w.sem["s"] = 0
	b := w.party("b", 2, "x", "s") // holds a permit, waits for x
	w.holders["s"] = append(w.holders["s"], Holder{Token: "running", Permits: 1})
	if got := victims(t, w, a, b); len(got) != 0 {
		t.Fatalf("victims %v: a permit held by a running holder will come free", got)
	}
	w.holders["s"] = w.holders["s"][:1] // only b holds the permits now
	if got := victims(t, w, a, b); len(got) != 1 || got[0] != "b" {
		t.Fatalf("victims %v, want [b]", got)
	}
}

// TestRandomGraphs: in any graph of waits, at most one wait of each
// cycle finds itself the victim, every member that finds a cycle finds
// the same set and victim, and waits that take their locks in one order
// never find one.
func TestRandomGraphs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ordered := rapid.Bool().Draw(t, "ordered")
		nLocks := rapid.IntRange(2, 6).Draw(t, "locks")
		nParties := rapid.IntRange(1, 7).Draw(t, "parties")
		w := newWorld()
		owner := map[int]string{} // a Mutex has one holder
		var ws []*Wait
		for p := range nParties {
			id := fmt.Sprintf("p%d", p)
			wants := rapid.IntRange(0, nLocks-1).Draw(t, "wants")
			var held []string
			for l := range nLocks {
				if _, taken := owner[l]; taken || l == wants || (ordered && l >= wants) {
					continue
				}
				if rapid.Bool().Draw(t, "holds") {
					owner[l] = id
					held = append(held, fmt.Sprint("L", l))
				}
			}
			if len(held) == 0 {
				continue
			}
			ws = append(ws, w.party(id, int64(rapid.IntRange(0, 3).Draw(t, "since")), fmt.Sprint("L", wants), held...))
		}
		seen := map[string]string{} // member -> the victim its cycle named
		found := 0
		for _, x := range ws {
			cyc, v, err := Find(context.Background(), w, x)
			if err != nil {
				t.Fatal(err)
			}
			if cyc == nil {
				continue
			}
			if ordered {
				t.Fatalf("waits in lock order reported a cycle: %v", cyc)
			}
			for _, m := range cyc {
				if prev, ok := seen[m.Token]; ok && prev != v.Token {
					t.Fatalf("%s's cycle named victim %s, another member's %s", m.Token, prev, v.Token)
				}
				seen[m.Token] = v.Token
			}
			if v.Token == x.Token {
				found++
			}
		}
		victimsNamed := map[string]bool{}
		for _, v := range seen {
			victimsNamed[v] = true
		}
		if found != len(victimsNamed) {
			t.Fatalf("%d waits gave up for %d cycles", found, len(victimsNamed))
		}
	})
}

// A record that outlived its wait (its DEL failed): it names a lock its
// owner no longer waits for (not queued there). Its owner runs: the
// younger wait through it is no victim; once the record's wait is queued
// again, the cycle is found.
func TestRecordLeftBehindIsRunning(t *testing.T) {
	w := newWorld()
	w.party("a", 1, "y", "x")
	b := w.party("b", 2, "x", "y")
	w.queued["y"] = nil // a's wait ended; its record did not
	if v := victims(t, w, b); len(v) != 0 {
		t.Fatalf("victims %v through a record left behind, want none", v)
	}
	w.queued["y"] = []string{"a"}
	if v := victims(t, w, b); len(v) != 1 {
		t.Fatalf("victims %v, want [b]", v)
	}
}
