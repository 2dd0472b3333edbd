package protocol

import (
	"strconv"
	"strings"
	"time"
)

// The protocol between Go and the Lua scripts, named once. scripts/lib.lua
// names the same values for the scripts; TestProtocolAgrees checks that
// both say the same.

// Reply codes: the first element of a script's array reply, or its whole
// integer reply.
const (
	ReplyHeld       = 1  // {1, fence}: acquired or re-entered
	ReplyBusy       = 0  // {0, pttl}: held by another owner
	ReplyNotHeld    = -1 // {-1} or -1: the caller holds nothing
	ReplyTooMany    = -2 // {-2, capacity}: more permits than the semaphore has
	ReplyTTLNotHeld = -3 // a ttl script: the caller holds nothing
	ReplyStale      = -4 // {-4} or -4: a later command of the hold ran first (internal/hold/doc.go, "Late commands")
	ReplySlow       = -5 // -5: a fast script's common case did not hold; it changed nothing (doc.go, "Fast scripts")
)

// RefusedMark starts the reply of a script whose publish was refused:
// {RefusedMark, error, reply} (see publish in scripts/lib.lua and
// the reporter of internal/transport).
const RefusedMark = "dlock:refused"

// Wake messages, published on a lock's channel (script-free mutexes,
// latches, an RWMutex's readers). A waiter whose turn it is is told on its
// Client's own channel instead, by its member (see wakeTo).
const (
	WakeOne = "one" // wake one waiter per process
	WakeAll = "all" // wake every waiter
)

// Hash fields of a lock's hash that inspection reads: a prefix and the
// owner token ('t:<token>'), or a name. The scripts write them (lib*.lua
// and the scripts of each kind); TestProtocolAgrees checks that the
// scripts name each.
const (
	FieldTaken   = "t:"    // when the hold began, server ms
	FieldSeq     = "q:"    // the hold's last sequence number (internal/hold/doc.go, "Late commands")
	FieldValue   = "v:"    // an Election leader's value
	FieldFence   = "f:"    // an RWMutex's or Semaphore's hold's own fence
	FieldPermits = "p:"    // a Semaphore holder's permits
	FieldLabel   = "l:"    // the hold's label (WithLabel; label.lua)
	FieldMode    = "mode"  // an RWMutex's: 'read' or 'write'
	FieldNext    = "@next" // a Mutex kept for the waiter told (lib_mutex.lua)
)

// TokenOf is the owner token in a waiter's member, '<client id>:<token>
// [:<more>]', or in a hand-off message, '<member> <fence> <ms>'.
func TokenOf(member string) string {
	member, _, _ = strings.Cut(member, " ")
	_, t, _ := strings.Cut(member, ":")
	t, _, _ = strings.Cut(t, ":")
	return t
}

// WakeTo says where a release wakes the waiters whose turn it is: each on
// its Client's channel, base + the Client's id (see the root's Client.wakeTo).
type WakeTo struct {
	Base    string
	Publish string // PUBLISH, or SPUBLISH on a cluster
	Reserve bool   // keep a freed mutex for the waiter told (lib_mutex.lua)
	// base and publish as script arguments, boxed once
	BaseArg, PublishArg any
}

// HandOffMessage is the form of a release's message to the waiter it
// handed its lock to (lib_mutex.lua's hand_off): the waiter's member,
// which routes it (TokenOf), the hold's fence and how long the lock is
// the waiter's from the release. docs/how-it-works.md shows it as is
// (internal/doclint checks).
const HandOffMessage = "<member> <fence> <ms>"

// HandOff is a hand-off message read (ParseHandOff).
type HandOff struct {
	Fence int64 // the hold's fence: the fence counter right after the hand-off
	MS    int64 // the lock is the waiter's for MS from the release
}

// ParseHandOff reads a hand-off message; ok is false when msg is not one.
func ParseHandOff(msg string) (m HandOff, ok bool) {
	f := strings.Fields(msg)
	if len(f) != strings.Count(HandOffMessage, " ")+1 {
		return m, false
	}
	var err1, err2 error
	m.Fence, err1 = strconv.ParseInt(f[1], 10, 64)
	m.MS, err2 = strconv.ParseInt(f[2], 10, 64)
	return m, err1 == nil && err2 == nil && m.MS > 0
}

// Member is how a waiter is registered in Redis (lib_queue.lua): its
// Client's id, its owner token, for a semaphore the permits it waits for
// (need > 0), and, when a release may hand it the lock for a lease of
// handOff, that lease in ms (lib_mutex.lua reads the suffix) — made in
// one allocation, as at every Lock.
func Member(id, token string, need int, handOff time.Duration) string {
	var num [20]byte
	var b strings.Builder
	b.Grow(len(id) + 1 + len(token) + 2*(1+len(num)))
	b.WriteString(id)
	b.WriteByte(':')
	b.WriteString(token)
	if need > 0 {
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], int64(need), 10))
	}
	if handOff > 0 {
		b.WriteString(":h")
		b.Write(strconv.AppendInt(num[:0], handOff.Milliseconds(), 10))
	}
	return b.String()
}
