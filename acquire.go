package dlock

import (
	"context"
	"time"
)

// request is one Lock or TryLock of a primitive, stated by the primitive:
// its keys, its protocol, its acquire script. Client.acquire does the rest
// for all of them: checks, options, re-entry, the attempt, the wait, the
// lease and its watchdog registration.
type request struct {
	what   string       // the primitive, for errors: "Mutex", "RWMutex", ...
	k      keys         // its keys
	side   string       // "" or, for an RWMutex, "r" or "w": a separate re-entry per side
	p      protocol     // its protocol on one deployment with scripts
	handle []LockOption // the handle's defaults
	need   int          // permits a semaphore request waits for; 0 for locks
	queue  bool         // a waiter keeps a place in a queue (renewed; left when it gives up)
	// anywhere is set for a Mutex, which a quorum and the script-free mode
	// also run; every other primitive needs Lua on one deployment.
	anywhere bool
	// token, if set, returns the owner token to acquire with (a writer
	// reading inside its write hold keeps its token), or refuses.
	token func(ctx context.Context) (string, error)
	// call is the acquire script call of one attempt; queued is true for
	// a Lock's attempts (which take or keep a place in a queue).
	call func(token string, cfg lockConfig, queued bool) call
}

// acquire runs a request: a TryLock (wait false) or a Lock.
func (c *Client) acquire(ctx context.Context, r request, wait bool, opts []LockOption) (*Lease, error) {
	if err := checkCall(ctx, c, r.k.name); err != nil {
		return nil, err
	}
	if !r.anywhere {
		if err := c.singleNode(r.what); err != nil {
			return nil, err
		}
	}
	cfg := defaultLock.with(r.handle).with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if outer := leaseFrom(ctx, c, r.k.lock, r.side); outer != nil {
		if c.plain {
			return nil, errNeedsScripts("re-entry")
		}
		return reenter(ctx, outer)
	}
	token := newToken()
	if r.token != nil {
		var err error
		if token, err = r.token(ctx); err != nil {
			return nil, err
		}
	}
	a := acquisition{c: c, name: r.k.name, channel: r.k.channel, token: token, need: r.need}
	if r.queue {
		a.keepAlive = cfg.queueTTL / 3
		a.abandon = c.leaveQueue(r.k, token)
	}
	a.p, a.attempt = c.deployment(r, token, cfg)
	return a.run(ctx, wait)
}

// deployment returns the protocol and the attempt of a request on this
// Client's deployment: a quorum and the script-free mode run a Mutex in
// their own way (quorum.go, plain.go); one deployment with scripts runs
// the request's script.
func (c *Client) deployment(r request, token string, cfg lockConfig) (protocol, attemptFunc) {
	switch {
	case c.q != nil:
		return quorumProto{c.q, r.k, c.publish}, func(ctx context.Context, _ bool) (*Lease, time.Duration, error) {
			return c.q.attempt(ctx, c, r.k, token, cfg)
		}
	case c.plain:
		return plainProto{r.k, c}, func(ctx context.Context, _ bool) (*Lease, time.Duration, error) {
			return c.plainAttempt(ctx, r.k, token, cfg)
		}
	}
	return r.p, func(ctx context.Context, queued bool) (*Lease, time.Duration, error) {
		start := time.Now()
		res, err := fenceReply("lock", r.k.name, c.grant(ctx, r.call(token, cfg, queued)))
		if err != nil {
			return nil, 0, err
		}
		switch res[0] {
		case replyHeld:
			h := newHold(c, r.k, r.p, token, res[1], cfg, start)
			h.side = r.side
			l, err := c.newLease(ctx, h)
			return l, 0, err
		case replyTooMany:
			return nil, 0, invalid("%s %q: %d permits asked for; its capacity is %d", r.what, r.k.name, r.need, res[1])
		}
		return nil, retryAfter(res[1], cfg.ttl), nil
	}
}
