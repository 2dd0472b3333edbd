package web

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dlock-go/dlock"
)

// The wait-for graph, as the page draws it: a node for each wait (an
// acquire that waits while it holds leases) and for each lock such a wait
// waits for or holds; an edge from a wait to each lock it waits for, and
// from a lock to each wait that holds it (the wait's HeldLock token
// matched to one of the lock's Holder tokens, when the snapshot inspected
// the lock). A deadlock's cycle — each wait waits for a lock the next
// holds — is marked on its nodes and edges, and its victim on its node.
// The layout is computed here, so that the page only draws: each
// connected part of the graph on a circle of its own, the parts with a
// cycle first, in rows.

// graphView is the graph and its size, in SVG user units.
type graphView struct {
	Nodes  []nodeView `json:"nodes"`
	Edges  []edgeView `json:"edges"`
	Width  int        `json:"width"`
	Height int        `json:"height"`
	// Omitted is how many waits were left out (past maxGraphWaits; never
	// one in a deadlock).
	Omitted int `json:"omitted"`
}

// nodeView is a wait or a lock.
type nodeView struct {
	ID     string  `json:"id"`
	Type   string  `json:"type"`  // "wait" or "lock"
	Label  string  `json:"label"` // a wait's who, a lock's name
	Kind   string  `json:"kind"`  // a lock's kind
	Token  string  `json:"token"` // a wait's token
	Title  string  `json:"title"` // the tooltip: the whole story
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
	Cycle  bool    `json:"cycle"`  // in a deadlock cycle
	Victim bool    `json:"victim"` // the wait that gives up
}

// edgeView is a wait waiting for a lock, or a lock held by a wait.
type edgeView struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Side  string `json:"side"` // an RWMutex's side
	Cycle bool   `json:"cycle"`
}

// maxGraphWaits bounds the waits drawn: a graph past it is unreadable,
// and the page redraws it every refresh.
const maxGraphWaits = 100

// Layout constants, in SVG user units.
const (
	graphPad      = 80   // room around a part for the labels
	graphSpacing  = 90   // between neighbours on a part's circle
	graphMinR     = 60   // the smallest circle
	graphMaxWidth = 1100 // a row's width before the next row
)

// lockKey names a lock of a kind (both sides of an RWMutex are one lock).
type lockKey struct {
	kind dlock.Kind
	name string
}

// keyOf is r's lock.
func keyOf(r dlock.LockRef) lockKey { return lockKey{r.Kind, r.Name} }

// graphBuilder collects the nodes and edges.
type graphBuilder struct {
	g       graphView
	byID    map[string]int // node id → index in g.Nodes
	locks   map[lockKey]string
	edges   map[[2]string]int // (from, to) → index in g.Edges
	holders map[lockKey]map[string]bool
	infos   map[lockKey]*dlock.LockInfo
}

// buildGraph makes the wait-for graph of s, laid out.
func buildGraph(s *dlock.Snapshot) graphView {
	b := &graphBuilder{g: graphView{Nodes: []nodeView{}, Edges: []edgeView{}}, byID: map[string]int{},
		locks: map[lockKey]string{}, edges: map[[2]string]int{}, holders: map[lockKey]map[string]bool{},
		infos: map[lockKey]*dlock.LockInfo{}}
	for _, l := range s.Locks {
		if l == nil {
			continue
		}
		k := lockKey{l.Kind, l.Name}
		b.infos[k] = l
		b.holders[k] = map[string]bool{}
		for _, h := range l.Holders {
			b.holders[k][h.Token] = true
		}
	}
	// the waits: those in a cycle first, so that none of them is left out
	var waits []dlock.Wait
	seen := map[string]bool{}
	for _, d := range s.Deadlocks {
		for _, w := range d.Waits {
			if !seen[w.Token] {
				seen[w.Token] = true
				waits = append(waits, w)
			}
		}
	}
	for _, w := range s.Waits {
		if !seen[w.Token] {
			seen[w.Token] = true
			waits = append(waits, w)
		}
	}
	if len(waits) > maxGraphWaits {
		b.g.Omitted = len(waits) - maxGraphWaits
		waits = waits[:maxGraphWaits]
	}
	for _, w := range waits {
		wid := b.wait(w)
		for _, f := range w.For {
			b.edge(wid, b.lock(keyOf(f)), f.Side)
		}
		for _, h := range w.Holds {
			k := keyOf(h.LockRef)
			// a hold the lock's inspection does not show is over
			if _, inspected := b.infos[k]; inspected && !b.holders[k][h.Token] {
				continue
			}
			b.edge(b.lock(k), wid, h.Side)
		}
	}
	var rings [][]string
	for _, d := range s.Deadlocks {
		rings = append(rings, b.markCycle(d))
	}
	b.layout(rings)
	return b.g
}

// wait adds w's node (once) and returns its id.
func (b *graphBuilder) wait(w dlock.Wait) string {
	id := "w:" + w.Token
	if _, ok := b.byID[id]; ok {
		return id
	}
	var t strings.Builder
	fmt.Fprintf(&t, "%s (token %s)\nholds:", who(w), shortToken(w.Token))
	for _, h := range w.Holds {
		t.WriteString(" " + h.LockRef.String())
	}
	t.WriteString("\nwaits for:")
	for _, f := range w.For {
		t.WriteString(" " + f.String())
	}
	b.add(nodeView{ID: id, Type: "wait", Label: who(w), Token: w.Token, Title: t.String()})
	return id
}

// lock adds k's node (once) and returns its id.
func (b *graphBuilder) lock(k lockKey) string {
	if id, ok := b.locks[k]; ok {
		return id
	}
	id := fmt.Sprintf("l:%d", len(b.locks))
	b.locks[k] = id
	title := fmt.Sprintf("%s %q", k.kind, k.name)
	if l := b.infos[k]; l != nil {
		for _, h := range l.Holders {
			title += "\nheld by " + holderWho(h)
		}
		if len(l.Waiters) > 0 {
			title += fmt.Sprintf("\n%d waiting", len(l.Waiters))
		}
	}
	b.add(nodeView{ID: id, Type: "lock", Label: nameLabel(k.name), Kind: string(k.kind), Title: title})
	return id
}

// holderWho names a holder as people know it.
func holderWho(h dlock.Holder) string {
	switch {
	case h.Label != "":
		return h.Label
	case h.Owner != nil && h.Owner.Label != "":
		return h.Owner.Label
	case h.Owner != nil:
		return fmt.Sprintf("%s/%d %s", h.Owner.Host, h.Owner.PID, h.Owner.Program)
	}
	return "token " + shortToken(h.Token)
}

// add appends a node.
func (b *graphBuilder) add(n nodeView) {
	b.byID[n.ID] = len(b.g.Nodes)
	b.g.Nodes = append(b.g.Nodes, n)
}

// edge adds the edge from → to (once) and returns its index.
func (b *graphBuilder) edge(from, to, side string) int {
	k := [2]string{from, to}
	if i, ok := b.edges[k]; ok {
		return i
	}
	b.edges[k] = len(b.g.Edges)
	b.g.Edges = append(b.g.Edges, edgeView{From: from, To: to, Side: side})
	return len(b.g.Edges) - 1
}

// markCycle marks d's waits, the locks between them and the edges that
// join them, and its victim; it returns the cycle's node ids in order
// (wait, lock, wait, lock...).
func (b *graphBuilder) markCycle(d dlock.Deadlock) []string {
	var ring []string
	n := len(d.Waits)
	for i, w := range d.Waits {
		wid := b.wait(w)
		b.mark(wid, w.Token == d.Victim)
		ring = append(ring, wid)
		next := d.Waits[(i+1)%n]
		for _, f := range w.For {
			k := keyOf(f)
			if !slices.ContainsFunc(next.Holds, func(h dlock.HeldLock) bool { return keyOf(h.LockRef) == k }) {
				continue
			}
			lid := b.lock(k)
			b.mark(lid, false)
			b.g.Edges[b.edge(wid, lid, f.Side)].Cycle = true
			b.g.Edges[b.edge(lid, b.wait(next), "")].Cycle = true
			ring = append(ring, lid)
			break
		}
	}
	return ring
}

// mark marks a node as in a cycle (and as the victim).
func (b *graphBuilder) mark(id string, victim bool) {
	n := &b.g.Nodes[b.byID[id]]
	n.Cycle = true
	n.Victim = n.Victim || victim
}

// layout places each connected part of the graph on a circle of its
// own: the parts with a cycle first, their nodes in the cycle's order,
// then the others, largest first; in rows of graphMaxWidth.
func (b *graphBuilder) layout(rings [][]string) {
	nodes := b.g.Nodes
	if len(nodes) == 0 {
		return
	}
	// the parts: union-find over the edges
	parent := make([]int, len(nodes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	adj := make([][]int, len(nodes))
	for _, e := range b.g.Edges {
		f, t := b.byID[e.From], b.byID[e.To]
		parent[find(f)] = find(t)
		adj[f] = append(adj[f], t)
		adj[t] = append(adj[t], f)
	}
	// each part's order: its rings' nodes, then the rest breadth first
	placed := make([]bool, len(nodes))
	order := map[int][]int{} // root → nodes in order
	var roots []int
	appendNode := func(i int) {
		r := find(i)
		if _, ok := order[r]; !ok {
			roots = append(roots, r)
		}
		order[r] = append(order[r], i)
		placed[i] = true
	}
	for _, ring := range rings {
		for _, id := range ring {
			if i := b.byID[id]; !placed[i] {
				appendNode(i)
			}
		}
	}
	for i := range nodes {
		if placed[i] {
			continue
		}
		queue := []int{i}
		appendNode(i)
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, nb := range adj[cur] {
				if !placed[nb] {
					appendNode(nb)
					queue = append(queue, nb)
				}
			}
		}
	}
	// the parts with a cycle first (as found), then the larger ones
	hasCycle := func(r int) bool { return slices.ContainsFunc(order[r], func(i int) bool { return nodes[i].Cycle }) }
	slices.SortStableFunc(roots, func(a, c int) int {
		ca, cc := hasCycle(a), hasCycle(c)
		if ca != cc {
			if ca {
				return -1
			}
			return 1
		}
		if ca {
			return 0
		}
		return cmp.Compare(len(order[c]), len(order[a]))
	})
	x, y, rowH, width := 0.0, 0.0, 0.0, 0.0
	for _, r := range roots {
		part := order[r]
		radius := 0.0
		if len(part) > 1 {
			radius = max(graphMinR, float64(len(part))*graphSpacing/(2*math.Pi))
		}
		size := 2*radius + 2*graphPad
		if x > 0 && x+size > graphMaxWidth {
			x, y, rowH = 0, y+rowH, 0
		}
		cx, cy := x+size/2, y+size/2
		for j, i := range part {
			a := -math.Pi/2 + 2*math.Pi*float64(j)/float64(len(part))
			nodes[i].X = math.Round((cx+radius*math.Cos(a))*10) / 10
			nodes[i].Y = math.Round((cy+radius*math.Sin(a))*10) / 10
		}
		x += size
		rowH = max(rowH, size)
		width = max(width, x)
	}
	b.g.Width, b.g.Height = int(math.Ceil(width)), int(math.Ceil(y+rowH))
}
