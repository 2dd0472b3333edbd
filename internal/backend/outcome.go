package backend

import (
	"context"
	"time"
)

// AttemptFunc makes one acquire attempt on the backend and says what it
// found (an outcome: data; the acquire path alone makes holds and
// leases). queued is true for a Lock's attempts (they take or keep a
// place in the queue), false for a TryLock's; placed is true when an
// earlier attempt of the same acquire made a place (it may have one to
// give up).
type AttemptFunc func(ctx context.Context, queued, placed bool) (Outcome, error)

// Outcome is what one attempt found.
type Outcome struct {
	Granted bool
	// granted: the Fence of each lock taken (fences, a set's, one per
	// part; else Fence), counted from start, when the granting command
	// was sent.
	Fence  int64
	Fences []int64
	Start  time.Time
	TTL    time.Duration // the lease from start, when not the asked TTL (a hand-off's)
	Handed bool          // granted by a release's hand-off (acquisition.HandedOver), not by an attempt
	// MaxFrom, if set, is when the hold's max hold (WithMaxHold) begins,
	// when not start: a hand-off's, when it reached the waiter (the
	// release granted it before), while its lease counts from the
	// earlier start for safety
	MaxFrom time.Time
	// not granted: try again within Wait at the latest; placed, if its
	// sent time is set, is the place in the queue that the attempt made
	// or kept (internal/acquisition/handoff.go).
	Wait   time.Duration
	Placed Place
	// GiveBack, if set, undoes what the attempt may have left (a quorum
	// round that did not win): the acquire path runs it as it runs its
	// own undo (hold.Keeper.Undo), at once, then, for what is unsettled, once
	// it can no longer run.
	GiveBack []UndoStep
	// Why, if set, is Why a round that a majority granted was not won
	// (a quorum that could not issue a fence, or whose round outlasted
	// its lease): a Lock's error says it if its ctx ends before the lock
	// is won
	Why error
	// SentTwice: the client library sent the attempt's command more than
	// once (driver.Reply.SentTwice): an earlier copy may have run, or may
	// still run later, whatever this one answered.
	SentTwice bool
}

// UndoStep is one undo an attempt leaves to the acquire path: with after
// nil, at once (and in the background if that fails: hold.Keeper.Undo); else
// in the background once after has closed (hold.Keeper.UndoLater), the attempt
// being able to run until then.
type UndoStep struct {
	After <-chan struct{}
	Undo  func(ctx context.Context) error
	// Buries: Undo buries the token first, so it may run before After
	// too (an attempt that arrives after it takes nothing): the acquire
	// path makes it at once as well when its ctx has ended.
	Buries bool
}

// Place is what a waiter knows of its latest Place in the queue: the
// fence counter's value as the attempt that made or kept it found it
// (seen; named false when the reply said none), and when that attempt
// was sent (zero: it has made none).
type Place struct {
	Seen  int64
	Named bool
	Sent  time.Time
}
