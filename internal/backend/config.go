package backend

import (
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// LockConfig is one lock's configuration, as the lock options
// (dlock.LockOption) set it.
type LockConfig struct {
	TTL      time.Duration
	MaxHold  time.Duration // WithMaxHold; 0: none
	Renew    bool
	QueueTTL time.Duration
	Readers  bool     // RWMutex: readers first
	Label    string   // WithLabel: recorded with the hold ("" for none)
	Set      LockOpts // the options given that only some locks take
}

// LockOpts are the lock options that only some locks take; a lock refuses
// the others (ErrInvalidArgument) rather than ignore them.
type LockOpts int

const (
	OptQueueTTL LockOpts = 1 << iota // Mutex, FairMutex, Semaphore, RWMutex writers
	OptReaders                       // RWMutex
)

// names of the options in lockOpts, for errors.
var optNames = map[LockOpts]string{OptQueueTTL: "WithQueueTTL", OptReaders: "WithReaderPreference"}

// Refuse returns an error for an option given that what does not take.
func (c LockConfig) Refuse(what string, takes LockOpts) error {
	for o, name := range optNames {
		if c.Set&o != 0 && takes&o == 0 {
			return errs.Invalid("%s does not apply to a %s", name, what)
		}
	}
	return nil
}

// Drift is the margin a holder keeps between its local deadline and the
// server's expiry: a share of the TTL for clock-rate differences plus a
// fixed slack for timers and scheduling.
type Drift struct {
	Factor float64
	Extra  time.Duration
}

// Of is the drift margin of a lease of ttl.
func (d Drift) Of(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*d.Factor) + d.Extra
}

// Validate says whether d can be used.
func (d Drift) Validate() error {
	if d.Factor < 0 || d.Factor >= 1 || d.Extra < 0 {
		return errs.Invalid("clock drift %v of the TTL + %v: want a factor in [0, 1) and a non-negative extra", d.Factor, d.Extra)
	}
	return nil
}
