package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// The protocol between Go and the Lua scripts, named once. scripts/lib.lua
// names the same values for the scripts; TestProtocolAgrees checks that
// both say the same.

// Reply codes: the first element of a script's array reply, or its whole
// integer reply.
const (
	replyHeld       = 1  // {1, fence}: acquired or re-entered
	replyBusy       = 0  // {0, pttl}: held by another owner
	replyNotHeld    = -1 // {-1} or -1: the caller holds nothing
	replyTooMany    = -2 // {-2, capacity}: more permits than the semaphore has
	replyTTLNotHeld = -3 // a ttl script: the caller holds nothing
	replyStale      = -4 // {-4} or -4: a later command of the hold ran first (hold.go, "Late commands")
)

// refusedMark starts the reply of a script whose publish was refused:
// {refusedMark, error, reply} (see publish in scripts/lib.lua and
// reporter.unwrap in stack.go).
const refusedMark = "dlock:refused"

// Wake messages, published on a lock's channel (script-free mutexes,
// latches, an RWMutex's readers). A waiter whose turn it is is told on its
// Client's own channel instead, by its member (see wakeTo).
const (
	wakeOne = "one" // wake one waiter per process
	wakeAll = "all" // wake every waiter
)

// Hash fields of a lock's hash that inspection reads: a prefix and the
// owner token ('t:<token>'), or a name. The scripts write them (lib*.lua
// and the scripts of each kind); TestProtocolAgrees checks that the
// scripts name each.
const (
	fieldTaken   = "t:"    // when the hold began, server ms
	fieldSeq     = "q:"    // the hold's last sequence number (hold.go, "Late commands")
	fieldValue   = "v:"    // an Election leader's value
	fieldFence   = "f:"    // an RWMutex's or Semaphore's hold's own fence
	fieldPermits = "p:"    // a Semaphore holder's permits
	fieldMode    = "mode"  // an RWMutex's: 'read' or 'write'
	fieldNext    = "@next" // a Mutex kept for the waiter told (lib_mutex.lua)
)

// withReceipt makes a final release (c, the release of an RWMutex or
// Semaphore hold) leave its token in k.dead for ttl as the receipt, so
// that a copy of it that go-redis sent again reports done (sent_again in
// lib_queue.lua): the dead set as a last key, the TTL as a last argument.
func withReceipt(c call, k *keys, ttl time.Duration) call {
	c.keys = append(slices.Clone(c.keys), k.dead)
	c.args = append(c.args, max(ttl, minTTL).Milliseconds())
	return c
}

// tokenOf is the owner token in a waiter's member, '<client id>:<token>
// [:<more>]', or in a hand-off message, '<member> <fence> <ms>'.
func tokenOf(member string) string {
	member, _, _ = strings.Cut(member, " ")
	_, t, _ := strings.Cut(member, ":")
	t, _, _ = strings.Cut(t, ":")
	return t
}

// wakeTo says where a release wakes the waiters whose turn it is: each on
// its Client's channel, base + the Client's id (see Client.wakeTo).
type wakeTo struct {
	base    string
	publish string // PUBLISH, or SPUBLISH on a cluster
	reserve bool   // keep a freed mutex for the waiter told (lib_mutex.lua)
	// base and publish as script arguments, boxed once
	baseArg, publishArg any
}

// protocol is what a kind of hold does in Redis, as script calls whose
// replies follow one convention, so that Lease and the watchdog serve
// every primitive:
//
//	release  1 done, -1 not held (left = 0 frees every hold of the token),
//	         -4 stale (left > 0)
//	renew    1 renewed, 0 not held, -4 stale
//	ttl      milliseconds left, -3 not held
//
// renew with exact set makes the hold's TTL exactly ttl (Extend); without,
// at least ttl (the watchdog): a renewal still in flight when Extend
// lengthened a lease must not shorten it again on the server. seq is the
// command's place in its hold's sequence (hold.go, "Late commands"); a
// final release (left = 0) needs none.
type protocol interface {
	release(token string, left int, seq int64) op
	renew(token string, ttl time.Duration, exact bool, seq int64) op
	ttl(token string) op
	// free is the hold's final release (release with left 0), told the
	// hold's fence and TTL where the deployment answers a copy of it sent
	// again as done (unlock.lua); elsewhere release(token, 0, 0).
	free(token string, fence int64, ttl time.Duration) op
	// ordered reports whether the server keeps the hold's sequence
	// (every protocol with scripts; not plain.go's).
	ordered() bool
}

// reentrant is the protocol of a hold that can be re-entered (Mutex,
// FairMutex, RWMutex; not a Semaphore's permits):
//
//	reenter  {1, ...} held with the new count, {-1} not held, {-4} stale
type reentrant interface {
	reenter(token string, count int, ttl time.Duration, seq int64) op
}

// op is one operation on Redis with an integer or array reply: a script
// call, or, without scripts, a transaction (see plain.go).
type op interface {
	run(ctx context.Context, r driver.Driver) driver.Reply
}

// retryAfter turns a holder's remaining lease (PTTL) into the longest
// wait before the next attempt. A key without expiry (never set by dlock)
// is retried after a TTL, in case no release is ever published for it.
func retryAfter(pttl int64, ttl time.Duration) time.Duration {
	if pttl < 0 {
		return ttl
	}
	return time.Duration(pttl) * time.Millisecond
}

// fenceReply reads a {1, fence} / {0, pttl} / {-1} reply.
func fenceReply(op, name string, cmd interface{ Int64Slice() ([]int64, error) }) ([]int64, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return nil, redisErr(op, name, err)
	}
	if len(res) < 1 || (res[0] >= 0 && len(res) < 2) {
		return nil, redisErr(op, name, errors.New("unexpected script reply"))
	}
	return res, nil
}
