package dlock

import (
	"context"
)

// request is one Lock or TryLock of a primitive, stated by the primitive:
// its keys, its protocol, its acquire script. Client.acquire does the rest
// for all of them: checks, options, re-entry, the attempt, the wait, the
// lease and its watchdog registration.
type request struct {
	what   string       // the primitive, for errors: "Mutex", "RWMutex", ...
	k      keys         // its keys
	side   side         // an RWMutex's read or write side: a separate re-entry per side
	p      protocol     // its protocol on one deployment with scripts
	handle []LockOption // the handle's defaults
	takes  lockOpts     // the options it takes beyond TTL and lease
	need   int          // permits a semaphore request waits for; 0 for locks
	queue  bool         // a waiter keeps a place in a queue (renewed; left when it gives up)
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
	if err := c.be.supports(r.what); err != nil {
		return nil, err
	}
	cfg := defaultLock.with(r.handle).with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.refuse(r.what, r.takes); err != nil {
		return nil, err
	}
	if _, ok := r.p.(reentrant); ok {
		if outer := leaseFrom(ctx, c, r.k.lock, r.side); outer != nil {
			if err := c.be.supports("re-entry"); err != nil {
				return nil, err
			}
			return reenter(ctx, outer)
		}
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
	a.p, a.attempt = c.be.attempt(c, r, token, cfg)
	return a.run(ctx, wait)
}
