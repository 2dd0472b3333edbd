package transport

import (
	"errors"
	"sync/atomic"
)

// Folds is what a quorum Client knows of the fold on each of its nodes
// (the fold of older fence counters into the Client's,
// internal/deploy/fold.go): the deployment records each node's outcome,
// and the quorum backend's fences count only the nodes folded ("Fences on
// a quorum", internal/backend/quorum.go). It lives here, below both. Safe
// for concurrent use.
type Folds struct {
	done []atomic.Bool           // folded, for good: a Client folds a node once
	why  []atomic.Pointer[error] // the last failed fold's error, while not done
}

// NewFolds returns the record of n nodes, none folded yet.
func NewFolds(n int) *Folds {
	return &Folds{done: make([]atomic.Bool, n), why: make([]atomic.Pointer[error], n)}
}

// Set records the end of a fold on node: done if err is nil, else why not.
func (f *Folds) Set(node int, err error) {
	if err == nil {
		f.done[node].Store(true)
		return
	}
	f.why[node].Store(&err)
}

// Snapshot says which nodes are folded now and, for each other one, why
// not (the last fold's error there, or ErrNotFolded while none ended).
func (f *Folds) Snapshot() (done []bool, why []error) {
	done, why = make([]bool, len(f.done)), make([]error, len(f.done))
	for i := range f.done {
		if done[i] = f.done[i].Load(); !done[i] {
			why[i] = ErrNotFolded
			if p := f.why[i].Load(); p != nil {
				why[i] = *p
			}
		}
	}
	return done, why
}

// ErrNotFolded is why a node is not folded when no fold has ended there.
var ErrNotFolded = errors.New("the fold of older fence counters has not ended on it yet")
