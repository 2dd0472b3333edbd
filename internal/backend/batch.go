package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// RunBatch sends the calls in one pipeline (a cluster's goes to each
// call's node). Calls that meet NOSCRIPT are sent again with their source
// in a second pipeline, so a flushed script cache costs one extra round
// trip, not a lost lease. With replica sync, the calls (of one node: see
// single.Batch) go on a dedicated connection, and each pipeline ends with
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

// sendBatch is runBatch on the pipelines that send sends. It sends in
// rounds: a call that met NOSCRIPT goes again whole, and a fast script's
// call that answered slow is followed by its full script's
// (protocol.Call.Next), each in the next round's pipeline (with its own
// WAIT, with replica sync: the last one follows every write). A call
// takes four rounds at most: its fast script, whole, then its full
// script, whole.
func sendBatch(ctx context.Context, send func(context.Context, []driver.Command) []driver.Reply,
	calls []protocol.Call, sync ReplicaSync) []driver.Reply {
	out := make([]driver.Reply, len(calls))
	cur := calls
	whole := make([]bool, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	var wait driver.Command // with replica sync, ends each pipeline
	if sync.Replicas > 0 {
		wait = protocol.Cmd("WAIT", sync.Replicas, sync.Timeout.Milliseconds())
	}
	var waited driver.Reply
	var twice []bool // a call whose first round was sent twice: its full script's reply says so too
	cmds := make([]driver.Command, 0, len(calls)+1)
	for len(todo) > 0 {
		cmds = cmds[:0]
		for _, i := range todo {
			cmds = append(cmds, cur[i].Command(whole[i]))
		}
		if sync.Replicas > 0 {
			cmds = append(cmds, wait)
		}
		rs := send(ctx, cmds)
		if sync.Replicas > 0 {
			waited = rs[len(todo)]
		}
		again := todo[:0]
		for j, i := range todo {
			r := rs[j]
			if !whole[i] && protocol.IsNoScript(r.Err) {
				whole[i] = true
				again = append(again, i)
				continue
			}
			if next, ok := cur[i].Next(r); ok {
				if &cur[0] == &calls[0] {
					cur = slices.Clone(calls) // the caller's calls stay as they were
				}
				cur[i], whole[i] = next, false
				if r.SentTwice {
					if twice == nil {
						twice = make([]bool, len(calls))
					}
					twice[i] = true
				}
				again = append(again, i)
				continue
			}
			out[i] = r
			if twice != nil && twice[i] {
				out[i].SentTwice = true
			}
		}
		todo = again
	}
	if sync.Replicas > 0 {
		sync.Check(waited, out)
	}
	return out
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

// renewFold is how many mutex renewals one script call carries
// (foldRenewals): the server runs a script without a break, so a call
// of 100 keeps it from its other clients some 0.3 ms at most on this VM.
const renewFold = 100

// foldRenewals gives calls with its mutex renewals (renew.lua, one hold
// each) folded into calls of up to renewFold holds each (renew.lua over
// several keys, off a cluster only: the keys of different locks live in
// different slots), and a func that turns the replies to the folded
// calls into one reply per call of calls, in its order. Why: a renewal's
// own work (GET, PTTL, PEXPIRE) is about a third of what its script call
// costs the server (bench/README, "Issue 47: 100 000 leases"); each
// renewal still runs as if alone. A folded call's error is each of its
// renewals' error: its outcome is unknown for all of them, as it would
// be for each call that went in one pipeline.
//
// It folds only a batch of renewals alone (the watchdog's): a batch that
// a server refuses folded (crossSlot) may then be sent again whole, one
// call each, as a renewal may run twice (a copy of one that ran
// lengthens again, or answers done: renew.lua).
func foldRenewals(calls []protocol.Call) ([]protocol.Call, func([]driver.Reply) []driver.Reply) {
	renewals := 0
	for _, c := range calls {
		if isRenewal(c) {
			renewals++
		}
	}
	if renewals < 2 || renewals < len(calls) {
		return calls, nil
	}
	n := len(calls)
	folded := make([]protocol.Call, 0, n-renewals+(renewals+renewFold-1)/renewFold)
	// where[i]: the folded call that carries call i, and its place in it (-1: alone)
	type place struct{ call, at int }
	where := make([]place, n)
	var cur *protocol.Call
	for i, c := range calls {
		if !isRenewal(c) {
			where[i] = place{len(folded), -1}
			folded = append(folded, c)
			continue
		}
		if cur == nil || len(cur.Keys) == renewFold {
			folded = append(folded, protocol.Call{S: protocol.RenewScript,
				Keys: make([]string, 0, min(renewFold, renewals)), Args: make([]any, 0, 4*min(renewFold, renewals))})
			cur = &folded[len(folded)-1]
		}
		renewals--
		where[i] = place{len(folded) - 1, len(cur.Keys)}
		cur.Keys = append(cur.Keys, c.Keys[0])
		cur.Args = append(cur.Args, c.Args...)
	}
	return folded, func(rs []driver.Reply) []driver.Reply {
		out := make([]driver.Reply, n)
		for i, p := range where {
			r := rs[p.call]
			if p.at < 0 || r.Err != nil {
				out[i] = r
				continue
			}
			if len(folded[p.call].Keys) == 1 { // a lone renewal: renew.lua's own reply
				out[i] = r
				continue
			}
			vs, ok := r.Val.([]any)
			if !ok || p.at >= len(vs) {
				out[i] = driver.Reply{Err: fmt.Errorf("dlock: renew.lua answered %v to %d renewals", r.Val, len(folded[p.call].Keys)), SentTwice: r.SentTwice}
				continue
			}
			out[i] = driver.Reply{Val: vs[p.at], SentTwice: r.SentTwice}
		}
		return out
	}
}

// crossSlot reports whether r is the server's refusal of a call whose
// keys are in different slots: a proxy that shards the keys without the
// cluster protocol (docs/deployments.md).
func crossSlot(r driver.Reply) bool {
	return r.Err != nil && strings.HasPrefix(r.Err.Error(), "CROSSSLOT")
}

// isRenewal reports whether c is one mutex hold's renewal (renew.lua's
// call on one key, as protocol.RenewArgs makes it).
func isRenewal(c protocol.Call) bool {
	return c.S.SHA == protocol.RenewScript.SHA && len(c.Keys) == 1 && len(c.Args) == 4 && c.Boxed == nil
}
