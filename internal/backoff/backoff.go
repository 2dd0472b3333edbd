// Package backoff is the pause of every retry loop of dlock: it doubles
// from a first pause up to a cap, and starts again from the first when
// the loop resets it (a call that succeeded, a connection that worked a
// while). Each loop names its own first pause and cap, beside the loop,
// and states there why; this package only counts.
package backoff

import "time"

// Doubling is a doubling backoff: its pauses are First, 2·First,
// 4·First, … up to Max, which then repeats. It is a value made fresh for
// each call that retries (New), so that no call inherits another's
// pauses; it is not safe for concurrent use (one loop owns it). The
// zero value pauses 0 each time: make one with New.
type Doubling struct {
	first, max time.Duration
	next       time.Duration // the pause Next returns next; 0: first
}

// New returns a Doubling that starts at first and doubles up to max. It
// panics when first is not positive or max is less than first
// (programmer misuse).
func New(first, max time.Duration) Doubling {
	if first <= 0 || max < first {
		panic("dlock: backoff.New: want 0 < first <= max")
	}
	return Doubling{first: first, max: max}
}

// Next returns the pause to wait now and doubles the one after, up to
// the cap.
func (b *Doubling) Next() time.Duration {
	d := b.next
	if d == 0 {
		d = b.first
	}
	if d > b.max/2 { // (2·d is over the cap, and could overflow)
		b.next = b.max
	} else {
		b.next = 2 * d
	}
	return d
}

// Reset starts b again: the next pause is the first.
func (b *Doubling) Reset() { b.next = 0 }
