package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// stallAfter is how long a run may go without progress before its waiting
// Locks are cancelled and called again. No working lock comes near it
// here: even the pollers hand over every few hundred ms.
const stallAfter = 2 * time.Second

var (
	errUnstuck = errors.New("bench: wait restarted after a stall")
	errStopped = errors.New("bench: run stopped")
)

// waits is the context under which the Locks of a run wait: one for all
// of them, replaced whenever unstick cancels it. It is how a run gets out
// of a lost wake-up (which some implementations have: see README.md), and
// how stop cuts short the waits still running at the end.
type waits struct {
	base context.Context // bounds the whole run

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc

	stopped  chan struct{}
	stopOnce sync.Once
}

func newWaits(base context.Context) *waits {
	w := &waits{base: base, stopped: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancelCause(base)
	return w
}

// current returns the context for the next Lock.
func (w *waits) current() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctx
}

// unstick cancels every Lock waiting now; lock calls them again.
func (w *waits) unstick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel(errUnstuck)
	w.ctx, w.cancel = context.WithCancelCause(w.base)
}

// stop ends the run: waiting Locks are cancelled and lock calls no more.
// It may be called more than once, from any goroutine.
func (w *waits) stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.mu.Lock()
		w.cancel(errStopped)
		w.mu.Unlock()
	})
}

func (w *waits) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

// lock calls m.Lock until it succeeds, calling it again when unstick cut
// it short. It returns errStopped when the run stopped first, and the
// Lock's error when it failed otherwise.
func (w *waits) lock(m mutex) error {
	for {
		ctx := w.current()
		err := m.Lock(ctx)
		switch {
		case err == nil:
			return nil
		case w.isStopped():
			return errStopped
		case errors.Is(context.Cause(ctx), errUnstuck):
			continue
		default:
			return err
		}
	}
}

// stallWatch calls unstick whenever no acquisition has been noted in
// progress (UnixNano of the last one) for stallAfter, until done is
// closed. The returned function says how many times it did.
func stallWatch(progress *atomic.Int64, done <-chan struct{}, unstick func()) func() int64 {
	return watch(done, unstick, func(now int64) bool {
		if now-progress.Load() < int64(stallAfter) {
			return false
		}
		progress.Store(now)
		return true
	})
}

// longWaitWatch calls unstick whenever one of the waits has been running
// for stallAfter, until done is closed; each element of since is the
// UnixNano at which its goroutine called Lock, or 0 when it is not in
// Lock. The returned function says how many times it did.
func longWaitWatch(since []atomic.Int64, done <-chan struct{}, unstick func()) func() int64 {
	return watch(done, unstick, func(now int64) bool {
		stuck := false
		for i := range since {
			if t := since[i].Load(); t != 0 && now-t >= int64(stallAfter) {
				since[i].CompareAndSwap(t, now) // count it once per stallAfter
				stuck = true
			}
		}
		return stuck
	})
}

// watch checks stuck ten times per stallAfter and calls unstick when it
// reports true, until done is closed.
func watch(done <-chan struct{}, unstick func(), stuck func(now int64) bool) func() int64 {
	var stalls atomic.Int64
	go func() {
		tick := time.NewTicker(stallAfter / 10)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if stuck(now.UnixNano()) {
					stalls.Add(1)
					unstick()
				}
			}
		}
	}()
	return stalls.Load
}
