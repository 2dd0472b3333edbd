package backend

import (
	"errors"
	"slices"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/protocol"
)

// A quorum buries the tokens of acquires given up on, as every
// deployment with scripts does (TestBuryOnlyWhereScriptsRun holds the
// others).
func TestQuorumBuries(t *testing.T) {
	if !(&Quorum{}).Caps().Bury {
		t.Fatal("a quorum does not bury tokens")
	}
}

// failure is what the tests' Fail makes: the failure itself.
type failure struct{ QuorumFailure }

func (f *failure) Error() string { return "quorum failed" }

// A quorum call that no majority decided is reported through Fail, with
// every node that failed: those whose call failed, and those that had not
// answered yet (errNoReplyYet), so that the root's *QuorumError names
// them all.
func TestQuorumFailureNamesEveryFailingNode(t *testing.T) {
	q := NewQuorum(QuorumConfig{Nodes: make([]driver.Driver, 5),
		Fail: func(f QuorumFailure) error { return &failure{f} }})
	down := errors.New("connection refused")
	var tl tally
	tl.vals = map[int][]int64{}
	yes := func(v []int64) bool { return v[0] == 1 }
	tl.add(0, driver.Reply{Val: int64(1)}, yes)
	tl.add(1, driver.Reply{Val: int64(0)}, yes)
	tl.add(2, driver.Reply{Err: down}, yes)
	answered := []bool{true, true, true, false, false}
	r := q.reply(quorumOp{p: quorumProto{q: q, k: &protocol.Keys{Name: "x"}}, name: "renew"}, tl, answered)
	if r.Err == nil {
		t.Fatal("1 of 5 nodes renewed, 1 refused: no error")
	}
	f, ok := errors.AsType[*failure](r.Err)
	if !ok {
		t.Fatalf("the error %v is not Fail's", r.Err)
	}
	if f.Op != "renew" || f.OK != 1 || f.Needed != 3 {
		t.Errorf("got %+v, want renew, 1 OK of 3 needed", f.QuorumFailure)
	}
	var nodes []int
	for _, n := range f.Failing {
		nodes = append(nodes, n.Node)
		if want := map[bool]error{true: down, false: errNoReplyYet}[n.Node == 2]; !errors.Is(n.Err, want) {
			t.Errorf("node %d failed with %v, want %v", n.Node, n.Err, want)
		}
	}
	if !slices.Equal(nodes, []int{2, 3, 4}) {
		t.Errorf("failing nodes %v, want [2 3 4]", nodes)
	}
}
