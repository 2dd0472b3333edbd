// Package transport is the driver chain of dlock: every call of a Client
// goes through it on its way to the client library's driver. It bounds
// each call by its ctx, shares round trips among calls made at once, and
// reports refusals read in replies (Stack). It names no Client: what it
// tells goes to a Reports.
package transport

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Stack returns the driver stack: what every call of a Client goes
// through on its way to the client library, outermost first. The root
// builds it, in this order, for a Client and for each node of a quorum
// (as go-redis chains hooks):
//
//   - reporter: a script whose publish was refused replies
//     {REFUSED, error, reply} (publish in scripts/lib.lua); the reporter
//     gives the call its reply and tells reports (the Client's deployment,
//     whose waits then poll: internal/deploy); and it tells reports of every
//     command the ACL user may not run, which is logged once
//     (CommandRefused), since some calls that meet one go on in the
//     background;
//   - pipelined: bounds every call by its ctx (the round trip runs on a
//     goroutine of its own while the caller waits) and shares round trips
//     among calls made at once (pipeline.go), unless the driver does both
//     itself (driver.Info.CtxBound and AutoPipeline: go-redis on dlock's
//     own connections, rueidisdlock, valkeydlock);
//   - the Driver d: go-redis's (internal/goredis), rueidisdlock's,
//     valkeydlock's, or one of the user's.
func Stack(d driver.Driver, reports Reports) driver.Driver {
	return &reporter{Driver: newPipelined(d), d: reports}
}

// Reports is what the stack tells of the refusals it reads in replies:
// the Client's deploy.Deployment (internal/deploy).
type Reports interface {
	// PublishRefused is told that a script's publish was refused (err,
	// the server's error): the Client's waits must then poll.
	PublishRefused(err error)
	// CommandRefused is told of the reply err to cmd (nil, or any error):
	// it logs once the commands the ACL user may not run.
	CommandRefused(cmd driver.Command, err error)
}

// reporter is the top of the stack (see Stack).
type reporter struct {
	driver.Driver
	d Reports
}

func (r *reporter) Do(ctx context.Context, cmd driver.Command) driver.Reply {
	reply := r.Driver.Do(ctx, cmd)
	r.unwrap(&reply)
	r.d.CommandRefused(cmd, reply.Err)
	return reply
}

func (r *reporter) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	replies := r.Driver.Pipeline(ctx, cmds)
	for i := range replies {
		r.unwrap(&replies[i])
		if i < len(cmds) {
			r.d.CommandRefused(cmds[i], replies[i].Err)
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
			c.r.d.CommandRefused(cmds[i], replies[i].Err)
		}
	}
	return replies
}

// unwrap gives reply the value its script meant when the script had a
// publish refused, and tells reports.
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
	r.d.PublishRefused(errors.New(msg))
}
