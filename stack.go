package dlock

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// The driver stack: what every call of a Client goes through on its way
// to the client library, outermost first. stack builds it, in this order,
// for a Client and for each node of a quorum (as go-redis chains hooks):
//
//   - reporter: a script whose publish was refused replies
//     {REFUSED, error, reply} (publish in scripts/lib.lua); the reporter
//     gives the call its reply and tells the deployment, whose waits then
//     poll (deploy.go); and it tells the deployment of every command the
//     ACL user may not run, which is logged once (commandRefused), since
//     some calls that meet one go on in the background;
//   - pipelined: bounds every call by its ctx (the round trip runs on a
//     goroutine of its own while the caller waits) and shares round trips
//     among calls made at once (pipeline.go);
//   - the Driver: go-redis's (internal/goredis), rueidisdlock's, valkeydlock's,
//     or one of the user's.
func stack(d driver.Driver, dep *deployment) driver.Driver {
	return &reporter{Driver: newPipelined(d), d: dep}
}

// reporter is the top of the stack (see stack).
type reporter struct {
	driver.Driver
	d *deployment
}

func (r *reporter) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	reply := r.Driver.Do(ctx, cmd)
	r.unwrap(&reply)
	r.d.commandRefused(cmd, reply.Err)
	return reply
}

func (r *reporter) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	replies := r.Driver.Pipeline(ctx, cmds)
	for i := range replies {
		r.unwrap(&replies[i])
		if i < len(cmds) {
			r.d.commandRefused(cmds[i], replies[i].Err)
		}
	}
	return replies
}

func (r *reporter) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	return r.Driver.Dedicated(ctx, key, func(c driver.Conn) error { return fn(reportingConn{c, r}) })
}

// reportingConn is a dedicated connection whose replies the reporter
// reads.
type reportingConn struct {
	driver.Conn
	r *reporter
}

func (c reportingConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	replies := c.Conn.Pipeline(ctx, cmds)
	for i := range replies {
		c.r.unwrap(&replies[i])
		if i < len(cmds) {
			c.r.d.commandRefused(cmds[i], replies[i].Err)
		}
	}
	return replies
}

// unwrap gives reply the value its script meant when the script had a
// publish refused, and tells the deployment.
func (r *reporter) unwrap(reply *driver.Reply) {
	v, ok := reply.Val.([]any)
	if !ok || len(v) < 2 || v[0] != protocol.RefusedMark {
		return
	}
	if len(v) > 2 {
		reply.Val = v[2]
	} else {
		reply.Val = nil
	}
	msg, _ := v[1].(string)
	r.d.pubsubRefused("a script's "+r.d.publish, errors.New(msg))
}
