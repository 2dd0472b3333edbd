package hold

import (
	"sync"

	"github.com/dlock-go/dlock/internal/transport"
)

// End is how a lease learns that it ended, and tells who asked: the part
// of a dlock.Lease that its hold (or set) finishes. Its zero value is a
// lease still held.
type End struct {
	// done is made by the first Done (under mu): a lease nobody asks for
	// it costs no channel.
	done chan struct{}

	mu    sync.Mutex
	err   error
	onEnd map[*int]func(error) // run when the lease ends: contexts, sets
}

// Done returns a channel closed when the lease ends.
func (e *End) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done == nil {
		if e.err != nil {
			return transport.Closed()
		}
		e.done = make(chan struct{})
	}
	return e.done
}

// Err is why the lease ended; nil while it has not (as far as it was
// told: dlock.Lease.Err asks its hold first).
func (e *End) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Finish ends the lease with err: Done closes, the callbacks run. Only
// the first call has an effect.
func (e *End) Finish(err error) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = err
	onEnd := e.onEnd
	e.onEnd = nil
	if e.done != nil {
		close(e.done)
	}
	e.mu.Unlock()
	for _, f := range onEnd {
		f(err)
	}
}

// WhenDone runs f with the lease's error when it ends (at once if it
// has), and returns a func that forgets f.
func (e *End) WhenDone(f func(error)) (forget func()) {
	id := new(int)
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		f(err)
		return func() {}
	}
	if e.onEnd == nil {
		e.onEnd = make(map[*int]func(error))
	}
	e.onEnd[id] = f
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.onEnd, id)
		e.mu.Unlock()
	}
}
