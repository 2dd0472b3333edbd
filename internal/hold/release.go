package hold

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// Releases that must happen even though the caller could not wait for
// them: an Unlock whose call failed (its ctx had ended, Redis was
// unreachable), and the holds a Client still has when it closes. A lock
// is never left to its TTL when Redis can be told sooner.

const (
	// cleanupTimeout bounds a release that must happen although its
	// caller's ctx has ended or the Client is closing: the undoing of an
	// ambiguous acquire, Close's releases, a background release's last
	// try.
	cleanupTimeout = 2 * time.Second
	// releaseTry bounds one try of a background release.
	releaseTry = time.Second
	// Background retries back off from releaseMinBackoff to
	// releaseMaxBackoff.
	releaseMinBackoff = 10 * time.Millisecond
	releaseMaxBackoff = 500 * time.Millisecond
)

// Bounded returns a context that outlives ctx's end but lasts at most
// cleanupTimeout.
func Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// free is the hold's final release (protocol.UnlockArgs.FreeCall).
func (h *Hold) free() backend.Op {
	h.mu.Lock()
	ttl := h.ttl
	h.mu.Unlock()
	return h.p.Free(h.token, h.fence, ttl)
}

// release frees every hold of h's token in Redis: one call (after
// buryFirst's, when it makes one).
func (h *Hold) release(ctx context.Context) error { return h.releaseReply(ctx).Err }

// releaseReply is release's reply (unlock.lua's), asked again while its
// outcome is unknown and ctx lasts (askAgain).
func (h *Hold) releaseReply(ctx context.Context) driver.Reply {
	h.buryFirst(ctx)
	o := h.free()
	return h.c.askAgain(ctx, false, o, h.c.run(ctx, false, o))
}

// askTries is how many calls at most an idempotent call of unknown
// outcome makes in all.
const askTries = 3

// unknownOutcome reports whether err leaves it unknown whether the call
// ran: no reply came for a call that was sent.
func unknownOutcome(err error) bool {
	if err == nil || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if _, ok := errors.AsType[*driver.ErrorReply](err); ok {
		return false
	}
	return transport.Transient(err)
}

// askAgain runs o again while r, its last reply, has an unknown outcome
// and ctx lasts, askTries calls in all, after a pause that doubles from
// releaseMinBackoff; it returns the last reply.
func (c *Keeper) askAgain(ctx context.Context, grant bool, o backend.Op, r driver.Reply) driver.Reply {
	pause := backoff.New(releaseMinBackoff, releaseMaxBackoff) // (askTries reaches no cap)
	for try := 1; try < askTries && unknownOutcome(r.Err) && ctx.Err() == nil; try++ {
		timer := time.NewTimer(pause.Next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return r
		case <-timer.C:
		}
		r = c.run(ctx, grant, o)
	}
	return r
}

// buryFirst buries h's token (bury.lua) when an attempt of its acquire
// may still reach the server (buryFor; see "Acquires sent twice" in
// internal/acquisition/acquisition.go), so that a copy landing after the release takes nothing. When
// the bury fails the release is made all the same: such a copy would
// take the lock for its TTL at most, as a crashed holder's.
func (h *Hold) buryFirst(ctx context.Context) {
	if h.rare.buryFor == 0 || !h.c.caps.Bury {
		return
	}
	call := protocol.BuryArgs{Token: h.token, For: h.rare.buryFor.Milliseconds()}.Call(h.k)
	if err := h.c.be.Everywhere(ctx, call); err != nil {
		h.c.tel.Log.Info("dlock: burying a token before its release failed", "lock", h.k.Name, "err", err)
	}
}

// releasers tracks the Client's background releases, so that Close can
// wait for them.
type releasers struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Background runs f on a goroutine that Close waits for, and reports
// true; once Close is under way it starts nothing and reports false (the
// caller then makes its one bounded try itself).
func (c *Keeper) Background(f func()) bool {
	r := &c.releasers
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(f)
	return true
}

// releaseLater releases h's holds in Redis in the background: h has ended
// (its lease is no longer renewed) but its release failed. It tries until
// Redis answers or until the hold would have expired by itself on the
// server, whichever comes first; at Close it makes one last bounded try.
func (c *Keeper) releaseLater(h *Hold) {
	h.mu.Lock()
	until := fromMono(h.deadline).Add(h.c.drift.Of(h.ttl))
	h.mu.Unlock()
	c.orLastTry(func() {
		timer := time.NewTimer(0) // at once: the failed call may have been cut short by its ctx
		defer timer.Stop()
		var err error
		for pause := backoff.New(releaseMinBackoff, releaseMaxBackoff); time.Now().Before(until); {
			select {
			case <-c.life.Done():
				c.releaseNow(h)
				return
			case <-timer.C:
			}
			ctx, cancel := context.WithTimeout(c.life, releaseTry)
			err = h.release(ctx)
			cancel()
			if err == nil {
				return
			}
			c.topo.Hint(err)
			timer.Reset(pause.Next())
		}
		c.tel.Log.Warn("dlock: release failed until the lease's expiry; the lock expires by itself",
			"lock", h.k.Name, "err", err)
	}, func() { c.releaseNow(h) })
}

// Undo runs undo — undoing what an acquire may have left in Redis — at
// once, so that the acquire's caller usually finds it done: within ctx,
// or, when ctx has ended, within undoGrace more. undo buries the
// acquire's token first (bury.lua), so no attempt still on its way can
// take anything after it. When that fails, it runs again in the
// background once after has closed — when the attempts given up on are
// done on the client's side (a quorum's stalled node has answered, say)
// — and again until it succeeds (undoLater); ttl is the longest TTL the
// acquire asked for.
func (c *Keeper) Undo(ctx context.Context, after <-chan struct{}, ttl time.Duration, undo func(ctx context.Context) error) {
	ctx, cancel := Graced(ctx)
	err := undo(ctx)
	cancel()
	if err != nil {
		c.UndoLater(after, ttl, undo)
	}
}

// UndoAfter is Undo for an undo that must not reach the server before
// what it undoes may have run there: one that buries no token (a
// deployment without scripts: a late SET NX would take the lock after
// the release). It waits for after — while ctx lasts, and undoGrace more
// once it has ended — then undoes as Undo does; when after has not
// closed by then, or the undo fails, the background does it (undoLater,
// which waits for after itself).
func (c *Keeper) UndoAfter(ctx context.Context, after <-chan struct{}, ttl time.Duration, undo func(ctx context.Context) error) {
	uctx, cancel := Graced(ctx)
	defer func() { cancel() }()
	if ctx.Err() == nil {
		select {
		case <-after:
		case <-ctx.Done():
			cancel()
			uctx, cancel = Graced(ctx)
		}
	}
	select {
	case <-after:
	case <-uctx.Done():
		c.UndoLater(after, ttl, undo)
		return
	}
	if err := undo(uctx); err != nil {
		c.UndoLater(after, ttl, undo)
	}
}

// undoPatience is the least time a background undo keeps trying (see
// undoLater).
const undoPatience = 30 * time.Second

// undoGrace is how long a call whose ctx has ended may still spend undoing
// what it left in Redis (a place in a queue, a hold it took) before it
// leaves that to the background: a round trip when Redis answers, and
// well within the promise that a call returns within 50 ms of its ctx.
const undoGrace = 20 * time.Millisecond

// Graced returns ctx while it lasts; once it has ended, a context that
// lasts undoGrace.
func Graced(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), undoGrace)
}

// UndoLater runs undo in the background — undoing what an acquire may
// have left in Redis: a hold, a place in a queue — once after has closed:
// the call that may have left it can no longer run on the server (see
// transport.Settled), so the undoing cannot come first. Each try gets a ctx
// bounded by cleanupTimeout.
//
// It tries again, with backoff, until undo succeeds: a server that does
// not answer now (partitioned, stopped) may still run the acquire later —
// TCP delivers an established connection's bytes once the path heals, a
// stopped server runs what it was sent when it resumes — and the claim
// would then be held by nobody for its TTL. An undo that succeeded has
// buried the token (bury.lua: an attempt that arrives after it takes
// nothing) and released what came before it. The claim's life starts
// when the server runs the attempt, which this side cannot know; so it
// keeps trying for twice the TTL, and at least undoPatience, from when
// after closed. A server that stays unreachable longer than that and
// then runs the attempt holds it for the TTL at most, as a holder that
// crashed would. When the Client closes meanwhile it makes one last try
// at once.
func (c *Keeper) UndoLater(after <-chan struct{}, ttl time.Duration, undo func(ctx context.Context) error) {
	once := func() error {
		ctx, cancel := Bounded(context.Background())
		defer cancel()
		return undo(ctx)
	}
	c.orLastTry(func() {
		select {
		case <-after:
		case <-c.life.Done():
			_ = once()
			return
		}
		until := time.Now().Add(max(2*ttl, undoPatience))
		timer := time.NewTimer(0)
		defer timer.Stop()
		var err error
		for pause := backoff.New(releaseMinBackoff, releaseMaxBackoff); time.Now().Before(until); {
			select {
			case <-c.life.Done():
				_ = once()
				return
			case <-timer.C:
			}
			if err = once(); err == nil {
				return
			}
			c.topo.Hint(err)
			timer.Reset(pause.Next())
		}
		c.tel.Log.Warn("dlock: undoing an acquire failed until its claim's TTL could have run out; a late attempt may hold the lock for its TTL",
			"err", err)
	}, func() { _ = once() })
}

// orLastTry runs retry, a release's or an undo's tries, in the
// background; once Close is under way (the background refuses it) it
// runs last instead, one try bounded by cleanupTimeout, on a goroutine of
// its own, so that the call that asked for it returns within its ctx as
// it would have otherwise (made on the caller's goroutine, a Lock whose
// ctx ended during a Close on a paused server returned 936 ms after its
// deadline: torture seed 545246989, TestUndoAfterCloseLeavesTheCallerFree).
// Close does not wait for it: it ends by itself within cleanupTimeout.
func (c *Keeper) orLastTry(retry, last func()) {
	if !c.Background(retry) {
		go last()
	}
}

// releaseNow makes one release of h, bounded by cleanupTimeout.
func (c *Keeper) releaseNow(h *Hold) {
	ctx, cancel := Bounded(context.Background())
	defer cancel()
	_ = h.release(ctx)
}

// releaseHolds releases the holds a closing Client still had, together
// (one pipeline where the deployment allows) and bounded by
// cleanupTimeout.
func (c *Keeper) releaseHolds(hs []*Hold) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := Bounded(context.Background())
	defer cancel()
	ops := make([]backend.Op, len(hs))
	for i, h := range hs {
		h.buryFirst(ctx)
		ops[i] = h.free()
	}
	c.be.Batch(ctx, ops, false)
}

// waitReleases stops new background releases and waits for those under
// way (each makes its last try, bounded, once the Client is closed).
func (c *Keeper) waitReleases() {
	r := &c.releasers
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}
