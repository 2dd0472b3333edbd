package dlock

import (
	"context"
	"sync"
	"time"
)

// Releases that must happen even though the caller could not wait for
// them: an Unlock whose call failed (its ctx had ended, Redis was
// unreachable), and the holds a Client still has when it closes. A lock
// is never left to its TTL when Redis can be told sooner.

const (
	// closeTimeout bounds what Close spends releasing the locks still
	// held, and each background release's last try at Close.
	closeTimeout = 2 * time.Second
	// releaseTry bounds one try of a background release.
	releaseTry = time.Second
	// Background retries back off from releaseMinBackoff to
	// releaseMaxBackoff.
	releaseMinBackoff = 10 * time.Millisecond
	releaseMaxBackoff = 500 * time.Millisecond
)

// releasers tracks the Client's background releases, so that Close can
// wait for them.
type releasers struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// releaseLater releases h's holds in Redis in the background: h has ended
// (its lease is no longer renewed) but its release failed. It tries until
// Redis answers or until the hold would have expired by itself on the
// server, whichever comes first; at Close it makes one last bounded try.
func (c *Client) releaseLater(h *hold) {
	r := &c.releasers
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.releaseNow(h) // Close is under way: one bounded try
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	h.mu.Lock()
	until := h.deadline.Add(h.c.drift.of(h.ttl))
	h.mu.Unlock()
	go func() {
		defer r.wg.Done()
		timer := time.NewTimer(0) // at once: the failed call may have been cut short by its ctx
		defer timer.Stop()
		for backoff := releaseMinBackoff; time.Now().Before(until); backoff = min(2*backoff, releaseMaxBackoff) {
			select {
			case <-c.life.Done():
				c.releaseNow(h)
				return
			case <-timer.C:
			}
			ctx, cancel := context.WithTimeout(c.life, releaseTry)
			err := h.p.release(h.token, 0).run(ctx, c.rdb).Err()
			cancel()
			if err == nil {
				return
			}
			c.clusterHint(err)
			timer.Reset(backoff)
		}
	}()
}

// releaseNow makes one release of h, bounded by closeTimeout.
func (c *Client) releaseNow(h *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = h.p.release(h.token, 0).run(ctx, c.rdb).Err()
}

// releaseAll releases the holds a closing Client still had, together (one
// pipeline where the deployment allows) and bounded by closeTimeout.
func (c *Client) releaseAll(hs []*hold) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	ops := make([]op, len(hs))
	for i, h := range hs {
		ops[i] = h.p.release(h.token, 0)
	}
	c.be.batch(ctx, ops, false)
}

// waitReleases stops new background releases and waits for those under
// way (each makes its last try, bounded, once the Client is closed).
func (c *Client) waitReleases() {
	r := &c.releasers
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}
