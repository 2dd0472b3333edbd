package dlock

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// script is one embedded Lua script, run by its SHA1 (EVALSHA) and sent
// whole (EVAL) only when the server does not have it: after a restart, a
// SCRIPT FLUSH, or on a node that never saw it.
type script struct {
	src string
	sha string
	// src and sha boxed once, as command words
	srcArg, shaArg any
}

// loadScript joins lib.lua, a family's helpers and a script (the last
// name) into one script. The helpers go in front of the script, or, when
// it has a line "-- @helpers", there: what comes before that line is the
// script's common case, which runs without defining them. (Redis runs the
// whole text at every call, and each function a script defines is made
// anew each time: the helpers of a family cost about a microsecond per
// call, as much as the common case's work.) lib.lua, small, always comes
// first.
func loadScript(names ...string) script {
	read := func(name string) string {
		b, err := scriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			panic("dlock: missing embedded script " + name)
		}
		return string(b)
	}
	if names[0] != "lib.lua" {
		names = append([]string{"lib.lua"}, names...)
	}
	var helpers strings.Builder
	for _, name := range names[1 : len(names)-1] {
		helpers.WriteString(read(name))
	}
	body := read(names[len(names)-1])
	src := read("lib.lua")
	if head, tail, ok := strings.Cut(body, helpersMark); ok {
		src += head + helpersMark + helpers.String() + tail
	} else {
		src += helpers.String() + body
	}
	src = wrapPublishing(src)
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

// helpersMark is the line of a script where its family's helpers go.
const helpersMark = "\n-- @helpers\n"

var (
	lockScript   = mutexScript("lock.lua")
	unlockScript = mutexScript("unlock.lua")
	leaveScript  = mutexScript("leave.lua")
	forceScript  = mutexScript("force.lua")
	// an Election is a fair mutex, with its value and observers
	electScript     = loadScript("lib.lua", "lib_queue.lua", "elect.lua")
	electReadScript = loadScript("elect_read.lua")
	renewScript     = loadScript("lib.lua", "renew.lua")
	ttlScript       = loadScript("ttl.lua")

	rwReadScript   = rwScript("rw_read.lua")
	rwWriteScript  = rwScript("rw_write.lua")
	rwUnlockScript = rwScript("rw_unlock.lua")
	rwRenewScript  = rwScript("rw_renew.lua")
	rwTTLScript    = rwScript("rw_ttl.lua")
	rwLeaveScript  = rwScript("rw_leave.lua")
	rwForceScript  = rwScript("rw_force.lua")

	semAcquireScript = semScript("sem_acquire.lua")
	semReleaseScript = semScript("sem_release.lua")
	semRenewScript   = semScript("sem_renew.lua")
	semTTLScript     = semScript("sem_ttl.lua")
	semPermitsScript = semScript("sem_permits.lua")
	semLeaveScript   = semScript("sem_leave.lua")
	semForceScript   = semScript("sem_force.lua")

	latchSetScript  = loadScript("latch_set.lua")
	latchDownScript = loadScript("latch_down.lua")
	latchOpenScript = loadScript("lib.lua", "lib_queue.lua", "latch_open.lua")

	lockAllScript = mutexScript("lock_all.lua")
	buryScript    = loadScript("bury.lua")
	qfenceScript  = loadScript("quorum_fence.lua")
	ownerScript   = loadScript("owner.lua")
)

// The scripts of each family, with the helpers they share in front.
func mutexScript(name string) script {
	return loadScript("lib.lua", "lib_queue.lua", "lib_mutex.lua", name)
}
func rwScript(name string) script { return loadScript("lib.lua", "lib_queue.lua", "lib_rw.lua", name) }
func semScript(name string) script {
	return loadScript("lib.lua", "lib_queue.lua", "lib_sem.lua", name)
}

// run runs the script: one round trip when the server has it cached, two
// when it answers NOSCRIPT.
func (s script) run(ctx context.Context, d driver.Driver, keys []string, args ...any) driver.Reply {
	return call{s: s, keys: keys, args: args}.run(ctx, d)
}

// call is one script invocation: a script with its keys and arguments.
type call struct {
	s    script
	keys []string
	args []any
	// boxed, when set, are the keys already made interfaces (a lock's,
	// made once: see keys.mutexWords), and keys is nil.
	boxed []any
}

// firstKey is the call's first key: its node's, on a cluster.
func (c call) firstKey() string {
	if c.boxed != nil {
		k, _ := c.boxed[0].(string)
		return k
	}
	return c.keys[0]
}

// run runs the call on its own (see script.run).
func (c call) run(ctx context.Context, d driver.Driver) driver.Reply {
	r := d.Do(ctx, c.command(false))
	if isNoScript(r.Err) {
		r = d.Do(ctx, c.command(true))
	}
	return r
}

// command is the call's EVALSHA, or with whole its EVAL.
func (c call) command(whole bool) driver.Command {
	if whole {
		return scriptCommand("EVAL", c.s.srcArg, c.keys, c.boxed, c.args)
	}
	return scriptCommand("EVALSHA", c.s.shaArg, c.keys, c.boxed, c.args)
}

// runBatch sends the calls in one pipeline (a cluster's goes to each
// call's node). Calls that meet NOSCRIPT are sent again with their source
// in a second pipeline, so a flushed script cache costs one extra round
// trip, not a lost lease. With replica sync, the calls (of one node: see
// single.batch) go on a dedicated connection, and each pipeline ends with
// a WAIT on it. The result has one reply per call; each carries its own
// error.
func runBatch(ctx context.Context, d driver.Driver, calls []call, sync replicaSync) []driver.Reply {
	if sync.replicas == 0 {
		return sendBatch(ctx, d.Pipeline, calls, sync)
	}
	var out []driver.Reply
	err := d.Dedicated(ctx, calls[0].firstKey(), func(conn driver.Conn) error {
		out = sendBatch(ctx, conn.Pipeline, calls, sync)
		return nil
	})
	if err != nil { // out is not ours to read when ctx ended (gaveUp)
		return failedAll(len(calls), err)
	}
	return out
}

// sendBatch is runBatch on the pipelines that send sends.
func sendBatch(ctx context.Context, send func(context.Context, []driver.Command) []driver.Reply,
	calls []call, sync replicaSync) []driver.Reply {
	cmds := make([]driver.Command, 0, len(calls)+1)
	for _, c := range calls {
		cmds = append(cmds, c.command(false))
	}
	var wait driver.Command // with replica sync, ends each pipeline
	if sync.replicas > 0 {
		wait = cmd("WAIT", sync.replicas, sync.timeout.Milliseconds())
		cmds = append(cmds, wait)
	}
	out := send(ctx, cmds)
	var again []int
	for i := range calls {
		if isNoScript(out[i].Err) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, calls[i].command(true))
		}
		if sync.replicas > 0 {
			cmds = append(cmds, wait)
		}
		evals := send(ctx, cmds)
		for j, i := range again {
			out[i] = evals[j]
		}
		if sync.replicas > 0 {
			out[len(calls)] = evals[len(again)]
		}
	}
	if sync.replicas > 0 {
		sync.check(out[len(calls)], out[:len(calls)])
	}
	return out[:len(calls)]
}

// firstErr returns the first error of a batch's replies.
func firstErr(rs []driver.Reply) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// failedAll returns n replies that failed with err.
func failedAll(n int, err error) []driver.Reply {
	out := make([]driver.Reply, n)
	for i := range out {
		out[i] = failedReply(err)
	}
	return out
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// flag is a boolean script argument: "1" or "0".
func flag(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// argTrue and argFalse are boxed once: a string made an interface
// anew would cost an allocation per call.
var argTrue, argFalse any = "1", "0"

// publishes finds the scripts that call lib.lua's publish.
var publishes = regexp.MustCompile(`\bpublish\(`)

// wrapPublishing wraps a script that may publish (src: lib.lua, then the
// rest) so that its reply R comes back as {REFUSED, error, R} when a
// publish was refused (see publish in scripts/lib.lua). A script's common
// case before its helpers mark (see loadScript) stays outside the wrapper
// when it does not publish: the wrapper costs every call that runs it.
func wrapPublishing(src string) string {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil || !strings.HasPrefix(src, string(lib)) {
		panic("dlock: a script does not start with lib.lua")
	}
	rest := src[len(lib):]
	if !publishes.MatchString(rest) {
		return src
	}
	head := ""
	if h, tail, ok := strings.Cut(rest, helpersMark); ok && !publishes.MatchString(h) {
		head, rest = h+helpersMark, tail
	}
	return string(lib) + head + "local function main()\n" + rest +
		"\nend\nlocal reply = main()\nif refused then\n  return {REFUSED, refused, reply}\nend\nreturn reply\n"
}
