package hold

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/telemetry"
)

// lossError is the error of a lost hold: it matches errs.LeaseLost and
// says why, with a reason for metrics.
type lossError struct {
	reason, name, why string
}

func (e *lossError) Error() string { return fmt.Sprintf("%v: %q: %s", errs.LeaseLost, e.name, e.why) }

func (e *lossError) Unwrap() error { return errs.LeaseLost }

// lost is the error of a hold lost for reason.
func lost(reason, name, why string) error { return &lossError{reason, name, why} }

// Loss reasons (dlock.reason, see internal/telemetry).
const (
	reasonDeadline = telemetry.ReasonDeadline // no renewal confirmed before the local deadline
	reasonEnded    = telemetry.ReasonEnded    // a fixed lease ran out
	reasonGone     = telemetry.ReasonGone     // Redis no longer had the hold
)

// lossOf is the reason and why of err if it is a loss ("" if not), for
// telemetry.
func lossOf(err error) (reason, why string) {
	if le, ok := errors.AsType[*lossError](err); ok { // no allocation, unlike errors.As
		return le.reason, le.why
	}
	return "", ""
}
