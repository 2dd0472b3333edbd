package protocol

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
var ScriptFiles embed.FS

// Script is one embedded Lua Script, run by its SHA1 (EVALSHA) and sent
// whole (EVAL) only when the server does not have it: after a restart, a
// SCRIPT FLUSH, or on a node that never saw it.
type Script struct {
	Src string
	SHA string
	// src and sha boxed once, as command words
	SrcArg, SHAArg any
}

// loadScript joins lib.lua, a family's helpers and a script (the last
// name) into one script. The helpers go in front of the script, or, when
// it has a line "-- @helpers", there: what comes before that line is the
// script's common case, which runs without defining them. (Redis runs the
// whole text at every call, and each function a script defines is made
// anew each time: the helpers of a family cost about a microsecond per
// call, as much as the common case's work.) lib.lua, small, always comes
// first.
func loadScript(names ...string) Script {
	read := func(name string) string {
		b, err := ScriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			panic("dlock: missing embedded script " + name)
		}
		return string(b)
	}
	if names[0] != "lib.lua" {
		names = append([]string{"lib.lua"}, names...)
	}
	var family strings.Builder
	for _, name := range names[1 : len(names)-1] {
		family.WriteString(read(name))
	}
	body := read(names[len(names)-1])
	helpers := usedHelpers(family.String(), body)
	src := read("lib.lua")
	if head, tail, ok := strings.Cut(body, helpersMark); ok {
		src += head + helpersMark + helpers + tail
	} else {
		src += helpers + body
	}
	src = wrapPublishing(src)
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return Script{Src: src, SHA: sha, SrcArg: src, SHAArg: sha}
}

// usedHelpers is the family's helpers (lib_*.lua, joined) without the
// functions that body does not call, directly or through a helper it
// calls: each function a script defines is made at every call that
// reaches it (a closure, then garbage), some 700 instructions of the
// server's each, whether or not the call uses it. A helper is a
// top-level "local function NAME(" through the first line "end" after
// it; everything else (names, comments) is kept. A name counts as
// called wherever it appears as a word outside a whole-line comment, so
// a doubt keeps a function, never drops one.
func usedHelpers(family, body string) string {
	type fn struct {
		name, text string
		used       bool
	}
	var fns []*fn
	var glue []string // text between functions; glue[i] comes before fns[i]
	var cur strings.Builder
	lines := strings.SplitAfter(family, "\n")
	for i := 0; i < len(lines); i++ {
		m := helperDef.FindStringSubmatch(lines[i])
		if m == nil {
			cur.WriteString(lines[i])
			continue
		}
		glue = append(glue, cur.String())
		cur.Reset()
		var text strings.Builder
		for ; i < len(lines); i++ {
			text.WriteString(lines[i])
			if strings.TrimRight(lines[i], "\r\n") == "end" {
				break
			}
		}
		fns = append(fns, &fn{name: m[1], text: text.String()})
	}
	tail := cur.String()
	// mark every function reachable from the body and the glue
	byName := map[string]*fn{}
	for _, f := range fns {
		byName[f.name] = f
	}
	var visit func(code string)
	visit = func(code string) {
		for _, w := range luaWord.FindAllString(codeOnly(code), -1) {
			if f := byName[w]; f != nil && !f.used {
				f.used = true
				visit(strings.SplitN(f.text, "\n", 2)[1])
			}
		}
	}
	visit(body + strings.Join(glue, "") + tail)
	var out strings.Builder
	for i, f := range fns {
		out.WriteString(glue[i])
		if f.used {
			out.WriteString(f.text)
		}
	}
	out.WriteString(tail)
	return out.String()
}

var (
	helperDef = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	luaWord   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// codeOnly is Lua code without its whole-line comments.
func codeOnly(code string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(code, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// helpersMark is the line of a script where its family's helpers go.
const helpersMark = "\n-- @helpers\n"

var (
	LockScript   = mutexScript("lock.lua")
	UnlockScript = mutexScript("unlock.lua")
	LeaveScript  = mutexScript("leave.lua")
	ForceScript  = mutexScript("force.lua")
	// an Election is a fair mutex, with its value and observers
	ElectScript     = mutexScript("elect.lua")
	ElectReadScript = loadScript("elect_read.lua")
	RenewScript     = loadScript("lib.lua", "renew.lua")
	TTLScript       = loadScript("ttl.lua")

	RWReadScript   = rwScript("rw_read.lua")
	RWWriteScript  = rwScript("rw_write.lua")
	RWUnlockScript = rwScript("rw_unlock.lua")
	RWRenewScript  = rwScript("rw_renew.lua")
	RWTTLScript    = rwScript("rw_ttl.lua")
	RWLeaveScript  = rwScript("rw_leave.lua")
	RWForceScript  = rwScript("rw_force.lua")

	SemAcquireScript = semScript("sem_acquire.lua")
	SemReleaseScript = semScript("sem_release.lua")
	SemRenewScript   = semScript("sem_renew.lua")
	SemTTLScript     = semScript("sem_ttl.lua")
	SemPermitsScript = semScript("sem_permits.lua")
	SemLeaveScript   = semScript("sem_leave.lua")
	SemForceScript   = semScript("sem_force.lua")

	LatchSetScript  = loadScript("latch_set.lua")
	LatchDownScript = loadScript("latch_down.lua")
	LatchOpenScript = loadScript("lib.lua", "lib_queue.lua", "latch_open.lua")

	LockAllScript = mutexScript("lock_all.lua")
	// the mutex's fast scripts (see "Fast scripts"): an Election's part
	// after their common case
	LockFastScript    = loadScript("lib.lua", "lock_fast.lua")
	UnlockFastScript  = loadScript("lib.lua", "lib_queue.lua", "unlock_fast.lua")
	BuryScript        = loadScript("lib.lua", "lib_queue.lua", "bury.lua")
	QuorumFenceScript = loadScript("quorum_fence.lua")
	OwnerScript       = loadScript("owner.lua")
	LabelScript       = loadScript("label.lua")
)

// The scripts of each family, with the helpers they share in front.
func mutexScript(name string) Script {
	return loadScript("lib.lua", "lib_queue.lua", "lib_mutex.lua", name)
}
func rwScript(name string) Script { return loadScript("lib.lua", "lib_queue.lua", "lib_rw.lua", name) }
func semScript(name string) Script {
	return loadScript("lib.lua", "lib_queue.lua", "lib_sem.lua", name)
}

// Call is one script invocation: a script with its keys and arguments.
type Call struct {
	S    Script
	Keys []string
	Args []any
	// Boxed, when set, are the keys already made interfaces (a lock's,
	// made once: see Keys.MutexWords), and keys is nil.
	Boxed []any
	// words, when set (boxedCall), is the call's EVALSHA whole, Args its
	// tail: one allocation for both.
	words []any
	// A fast script's call carries full, the EVALSHA words of the full
	// script's call (fullS) to make in its place when it answers
	// ReplySlow, and hint, the lock's keys, whose contention hint it sets
	// then. A full first attempt made because of the hint carries hint
	// alone, and sets it again when the lock is held. See "Fast scripts".
	full  []any
	fullS *Script
	hint  *Keys
}

// Next is the call to make after c answered r: when c is a fast script's
// and answered ReplySlow, its full script's call. It keeps the lock's
// contention hint: a fast script that answered slow, or a full first
// attempt that found the lock held, marks it contended.
func (c Call) Next(r driver.Reply) (Call, bool) {
	if c.hint == nil || r.Err != nil {
		return Call{}, false
	}
	if c.full == nil { // a full first attempt, made because of the hint
		if v, ok := r.Val.([]any); ok && len(v) > 0 && v[0] == any(int64(ReplyBusy)) {
			c.hint.busy()
		}
		return Call{}, false
	}
	if v, ok := r.Val.(int64); !ok || v != ReplySlow {
		return Call{}, false
	}
	c.hint.busy()
	return c.Full(), true
}

// Full is the call itself, or, for a fast script's call, its full
// script's call alone: where a round trip more would cost more than the
// fast script saves (replica sync, whose every round trip ends with a
// WAIT that blocks its full timeout when replicas are missing).
func (c Call) Full() Call {
	if c.full == nil {
		return c
	}
	n := c.full[2].(int)
	return Call{S: *c.fullS, Boxed: c.full[3 : 3+n], Args: c.full[3+n:], words: c.full}
}

// boxedCall returns a call of s on the boxed keys whose Args (returned)
// has n words, room for max, and lives in the tail of the call's EVALSHA
// command: fill it, and append to it only within max.
func boxedCall(s Script, boxed []any, n, max int) (Call, []any) {
	head := 3 + len(boxed)
	return boxedIn(s, boxed, make([]any, head+n, head+max))
}

// boxedIn is boxedCall in words, made by the caller (as long as the
// call's EVALSHA).
func boxedIn(s Script, boxed []any, words []any) (Call, []any) {
	head := 3 + len(boxed)
	words[0], words[1], words[2] = evalSHA, s.SHAArg, len(boxed)
	copy(words[3:], boxed)
	return Call{S: s, Boxed: boxed, Args: words[head:], words: words}, words[head:]
}

// evalSHA is boxed once.
var evalSHA any = "EVALSHA"

// FirstKey is the call's first key: its node's, on a cluster.
func (c Call) FirstKey() string {
	if c.Boxed != nil {
		k, _ := c.Boxed[0].(string)
		return k
	}
	return c.Keys[0]
}

// Run runs the call on its own: one round trip when the server has its
// script cached, two when it answers NOSCRIPT; a fast script's that
// answers slow, then its full script's (Next).
func (c Call) Run(ctx context.Context, d driver.Driver) driver.Reply {
	r := c.run(ctx, d)
	if next, ok := c.Next(r); ok {
		n := next.run(ctx, d)
		n.SentTwice = n.SentTwice || r.SentTwice // the first, sent twice, may still run
		return n
	}
	return r
}

// run is Run without Next.
func (c Call) run(ctx context.Context, d driver.Driver) driver.Reply {
	r := d.Do(ctx, c.Command(false))
	if IsNoScript(r.Err) {
		r = d.Do(ctx, c.Command(true))
	}
	return r
}

// Command is the call's EVALSHA, or with whole its EVAL.
func (c Call) Command(whole bool) driver.Command {
	if whole {
		return ScriptCommand("EVAL", c.S.SrcArg, c.Keys, c.Boxed, c.Args)
	}
	if c.words != nil && len(c.words) == 3+len(c.Boxed)+len(c.Args) { // Args is still words' tail: filled, not appended to
		return driver.Command{Args: c.words, FirstKey: 3, Keys: len(c.Boxed)}
	}
	return ScriptCommand("EVALSHA", c.S.SHAArg, c.Keys, c.Boxed, c.Args)
}

// IsNoScript reports whether err is the server's NOSCRIPT: it does not have
// the script (restarted, SCRIPT FLUSH, a node that never saw it).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Flag is a boolean script argument: "1" or "0".
func Flag(b bool) any {
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
	lib, err := ScriptFiles.ReadFile("scripts/lib.lua")
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
