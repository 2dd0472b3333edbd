package dlock

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
)

// endedHold is a held whose hold has ended (err) without telling its
// leases yet: the moment between the two steps of an end (the internal
// hold package's TestErrSeesAnEndBeforeItsLeasesAreTold).
type endedHold struct {
	held
	err error
}

func (h endedHold) Check() error { return h.err }

// A set's Err sees a part's end before the part's callbacks have ended
// the set: the torture's reader SIGSTOPped past its TTL, holding a set.
func TestSetErrSeesAPartsEndBeforeItIsTold(t *testing.T) {
	p1 := &Lease{of: endedHold{}, end: new(hold.End)}
	p2 := &Lease{of: endedHold{err: errs.LeaseLost}, end: new(hold.End)}
	s := newSet([]*Lease{p1, p2})
	if err := s.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a set's Err() = %v after one of its parts ended, want ErrLeaseLost", err)
	}
}
