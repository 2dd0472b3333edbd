package web

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestGraphMarksTheCycle: a three-party deadlock is drawn as six red
// edges (wait → lock it waits for → the wait that holds it), over its
// three waits and three locks, the victim marked; the unrelated wait is
// drawn, not marked.
func TestGraphMarksTheCycle(t *testing.T) {
	s := threeCycle(time.Now())
	g := buildGraph(s)
	byID := map[string]nodeView{}
	cycleNodes, victims := 0, 0
	for _, n := range g.Nodes {
		byID[n.ID] = n
		if n.Cycle {
			cycleNodes++
		}
		if n.Victim {
			victims++
			if n.Token != s.Deadlocks[0].Victim || n.Label != "export" {
				t.Errorf("victim node %+v, want export's wait", n)
			}
		}
	}
	if cycleNodes != 6 || victims != 1 {
		t.Errorf("%d nodes in the cycle and %d victims, want 6 and 1", cycleNodes, victims)
	}
	var cycleEdges []edgeView
	for _, e := range g.Edges {
		if e.Cycle {
			cycleEdges = append(cycleEdges, e)
		}
	}
	if len(cycleEdges) != 6 {
		t.Fatalf("%d cycle edges, want 6: %+v", len(cycleEdges), g.Edges)
	}
	// the red edges close: following them from any node comes back
	next := map[string]string{}
	for _, e := range cycleEdges {
		next[e.From] = e.To
		if byID[e.From].Type == byID[e.To].Type {
			t.Errorf("edge %s → %s joins two %ss", e.From, e.To, byID[e.From].Type)
		}
	}
	start := cycleEdges[0].From
	cur := start
	for range 6 {
		cur = next[cur]
	}
	if cur != start {
		t.Errorf("the cycle edges do not close: from %s, six steps lead to %s", start, cur)
	}
	// the unrelated wait: its edge to the lock it waits for, and from the
	// semaphore it holds (not inspected: taken on its word), not red
	var report nodeView
	for _, n := range g.Nodes {
		if n.Label == "report" {
			report = n
		}
	}
	if report.ID == "" || report.Cycle {
		t.Fatalf("report's wait: %+v", report)
	}
	in, out := 0, 0
	for _, e := range g.Edges {
		if e.To == report.ID {
			in++
		}
		if e.From == report.ID {
			out++
		}
	}
	if in != 1 || out != 1 {
		t.Errorf("report's wait has %d edges in and %d out, want 1 and 1", in, out)
	}
	if g.Width <= 0 || g.Height <= 0 {
		t.Errorf("graph size %dx%d", g.Width, g.Height)
	}
	for _, n := range g.Nodes {
		if n.X < 0 || n.Y < 0 || n.X > float64(g.Width) || n.Y > float64(g.Height) {
			t.Errorf("node %s at (%v,%v), outside %dx%d", n.ID, n.X, n.Y, g.Width, g.Height)
		}
	}
}

// TestGraphDropsAHoldThatIsOver: a wait's record that it holds a lock is
// drawn only while the lock's inspection shows that hold (its token among
// the holders).
func TestGraphDropsAHoldThatIsOver(t *testing.T) {
	now := time.Now()
	s := &dlock.Snapshot{At: now,
		Locks: []*dlock.LockInfo{{Kind: dlock.KindMutex, Name: "a", Held: true, Holders: []dlock.Holder{{Token: "someone-else"}}}},
		Waits: []dlock.Wait{{Token: "w1", For: []dlock.LockRef{{Kind: dlock.KindMutex, Name: "b"}},
			Holds: []dlock.HeldLock{{LockRef: dlock.LockRef{Kind: dlock.KindMutex, Name: "a"}, Token: "old"}}}}}
	g := buildGraph(s)
	for _, e := range g.Edges {
		if e.To == "w:w1" {
			t.Errorf("edge %+v: a lock drawn as held by a wait whose hold is over", e)
		}
	}
	if len(g.Edges) != 1 {
		t.Errorf("%d edges, want 1 (w1 waits for b): %+v", len(g.Edges), g.Edges)
	}
}

// TestGraphBounded: past maxGraphWaits waits, the rest are counted, not
// drawn; an empty snapshot draws nothing.
func TestGraphBounded(t *testing.T) {
	s := &dlock.Snapshot{At: time.Now()}
	for i := range maxGraphWaits + 7 {
		s.Waits = append(s.Waits, dlock.Wait{Token: string(rune('A'+i%26)) + string(rune('a'+i/26)),
			For: []dlock.LockRef{{Kind: dlock.KindMutex, Name: "x"}}})
	}
	g := buildGraph(s)
	if g.Omitted != 7 || len(g.Nodes) != maxGraphWaits+1 {
		t.Errorf("omitted %d, nodes %d; want 7, %d", g.Omitted, len(g.Nodes), maxGraphWaits+1)
	}
	if e := buildGraph(&dlock.Snapshot{}); len(e.Nodes) != 0 || e.Width != 0 {
		t.Errorf("empty snapshot: %+v", e)
	}
}
