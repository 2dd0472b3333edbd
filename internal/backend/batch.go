package backend

import (
	"context"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// RunBatch sends the calls in one pipeline (a cluster's goes to each
// call's node). Calls that meet NOSCRIPT are sent again with their source
// in a second pipeline, so a flushed script cache costs one extra round
// trip, not a lost lease. With replica sync, the calls (of one node: see
// single.batch) go on a dedicated connection, and each pipeline ends with
// a WAIT on it. The result has one reply per call; each carries its own
// error.
func RunBatch(ctx context.Context, d driver.Driver, calls []protocol.Call, sync ReplicaSync) []driver.Reply {
	if sync.Replicas == 0 {
		return sendBatch(ctx, d.Pipeline, calls, sync)
	}
	var out []driver.Reply
	err := d.Dedicated(ctx, calls[0].FirstKey(), func(conn driver.Conn) error {
		out = sendBatch(ctx, conn.Pipeline, calls, sync)
		return nil
	})
	if err != nil { // out is not ours to read when ctx ended (transport.GaveUp)
		return transport.FailedAll(len(calls), err)
	}
	return out
}

// sendBatch is runBatch on the pipelines that send sends.
func sendBatch(ctx context.Context, send func(context.Context, []driver.Command) []driver.Reply,
	calls []protocol.Call, sync ReplicaSync) []driver.Reply {
	cmds := make([]driver.Command, 0, len(calls)+1)
	for _, c := range calls {
		cmds = append(cmds, c.Command(false))
	}
	var wait driver.Command // with replica sync, ends each pipeline
	if sync.Replicas > 0 {
		wait = protocol.Cmd("WAIT", sync.Replicas, sync.Timeout.Milliseconds())
		cmds = append(cmds, wait)
	}
	out := send(ctx, cmds)
	var again []int
	for i := range calls {
		if protocol.IsNoScript(out[i].Err) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, calls[i].Command(true))
		}
		if sync.Replicas > 0 {
			cmds = append(cmds, wait)
		}
		evals := send(ctx, cmds)
		for j, i := range again {
			out[i] = evals[j]
		}
		if sync.Replicas > 0 {
			out[len(calls)] = evals[len(again)]
		}
	}
	if sync.Replicas > 0 {
		sync.Check(out[len(calls)], out[:len(calls)])
	}
	return out[:len(calls)]
}

// FirstErr returns the first error of a batch's replies.
func FirstErr(rs []driver.Reply) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
