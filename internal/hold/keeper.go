package hold

import (
	"context"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/telemetry"
	"github.com/dlock-go/dlock/internal/transport"
)

// Keeper keeps a Client's holds: it makes them, renews them (its
// watchdog), ends those whose deadline passes, and releases them,
// retrying in the background when a release fails. One per Client.
type Keeper struct {
	be        backend.Backend
	caps      backend.Caps
	drift     backend.Drift
	tel       *telemetry.Telemetry
	life      context.Context
	topo      *transport.Topology
	wd        *watchdog
	releasers releasers
}

// Env is what a Keeper needs of its Client.
type Env struct {
	Backend backend.Backend
	Drift   backend.Drift
	Tel     *telemetry.Telemetry
	// Life ends when the Client closes: the watchdog stops, ending the
	// holds still kept (errs.Closed) and releasing them.
	Life context.Context
	// Topology, on a cluster, runs a call again while the cluster
	// answers it with a transient error and its ctx lasts, and refreshes
	// the slot map after a failed call (internal/transport/topology.go,
	// "Topology changes").
	Topology *transport.Topology
}

// NewKeeper returns the Keeper of a Client, its watchdog running until
// env.Life ends.
func NewKeeper(env Env) *Keeper {
	c := &Keeper{be: env.Backend, caps: env.Backend.Caps(), drift: env.Drift, tel: env.Tel, life: env.Life,
		topo: env.Topology}
	c.wd = newWatchdog(c)
	go c.wd.run(c.life)
	return c
}

// Keep makes the hold that an attempt has just taken, with its first
// lease (known by FirstEnd), and watches it. When the Client has closed
// meanwhile it releases the hold (bounded) and returns errs.Closed.
func (c *Keeper) Keep(ctx context.Context, s Spec) (*Hold, error) {
	h := newHold(c, s)
	_ = h.Attach(&h.own) // a new hold has not ended
	if !c.wd.add(h) {
		ctx, cancel := Bounded(ctx)
		defer cancel()
		_ = h.release(ctx)
		return nil, errs.Closed
	}
	c.tel.HoldStarted(h.What(), h.k.Name)
	return h, nil
}

// Close waits, once env.Life has ended, for the watchdog to end and
// release the holds still kept, and for the background releases under
// way to make their last try.
func (c *Keeper) Close() {
	<-c.wd.done
	c.waitReleases()
}

// Tel is the Client's telemetry.
func (c *Keeper) Tel() *telemetry.Telemetry { return c.tel }

// run runs o, a command of a hold (a grant when grant is set: it makes or
// extends the hold), and on a cluster again while the cluster answers it
// with a transient error (Topology.Retry). Off a cluster it makes no closure:
// a call costs no allocation of its own.
func (c *Keeper) run(ctx context.Context, grant bool, o backend.Op) driver.Reply {
	if !c.topo.Cluster() {
		if grant {
			return c.be.Grant(ctx, o)
		}
		return c.be.Run(ctx, o)
	}
	return c.topo.Retry(ctx, func() driver.Reply {
		if grant {
			return c.be.Grant(ctx, o)
		}
		return c.be.Run(ctx, o)
	})
}
