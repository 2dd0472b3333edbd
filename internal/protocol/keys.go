package protocol

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/keyslot"
)

// Kind is a family of locks that share a layout in Redis. Each kind has
// its own names, so that locks of different kinds called alike are
// different locks and never read each other's keys (a Semaphore("x")
// does not count a Mutex("x") holder as a permit, nor meet a WRONGTYPE).
// Mutex and FairMutex are one kind: one lock, which both can take.
// Kinds lists them all, once; everything else that lists kinds (the
// public dlock.Kind, inspection's table, the key parser) is made from it
// or checked against it.
type Kind struct {
	Name string // as inspection reports it (dlock.Kind)
	// Tag follows the hash tag in each of its keys' names, ":<Tag>"; a
	// Mutex's has none: <prefix>:{<name>}...
	Tag string
	// Own are the suffixes of the keys only this kind has, after those
	// every kind has (commonSuffixes), and own sets them in its KindKeys.
	Own []string
	own func(names []string) *KindKeys
	// mutex: its scripts are the mutex's (lib_mutex.lua), whose keys a
	// lock's Keys box once (MutexWords).
	mutex bool
}

// The kinds.
var (
	MutexKind = &Kind{Name: "mutex", mutex: true} // Mutex, FairMutex
	RWKind    = &Kind{Name: "rwmutex", Tag: "rw", Own: []string{":readers", ":rqueue", ":rphase"},
		own: func(n []string) *KindKeys { return &KindKeys{Readers: n[0], RQueue: n[1], RPhase: n[2]} }}
	SemaphoreKind = &Kind{Name: "semaphore", Tag: "sem", Own: []string{":leases", ":permits"},
		own: func(n []string) *KindKeys { return &KindKeys{Leases: n[0], Permits: n[1]} }}
	LatchKind = &Kind{Name: "latch", Tag: "latch", Own: []string{":calls", ":calls:prev", ":ids"},
		own: func(n []string) *KindKeys { return &KindKeys{Calls: n[0], CallsPrev: n[1], IDs: n[2]} }}
	ElectionKind = &Kind{Name: "election", Tag: "election", mutex: true}
)

// Kinds lists every kind of lock, once.
var Kinds = []*Kind{MutexKind, RWKind, SemaphoreKind, LatchKind, ElectionKind}

// Keys names everything one lock uses in Redis. All of it carries the same
// hash tag, {<escaped name>}, so that on a Redis Cluster the lock's Keys and
// its channel live in one slot and one script may touch them all. Below,
// <lock> is <prefix>:{<name>} for a mutex and <prefix>:{<name>}:<kind> for
// the other kinds.
type Keys struct {
	Name    string // the user's lock name, for messages
	Lock    string // <lock>          the lock itself
	Fence   string // the fence counter the lock shares (FenceKey), never expires
	Channel string // <lock>:ch       release notifications; an Election's observers
	Queue   string // <lock>:queue    waiters: token -> arrival
	Alive   string // <lock>:alive    waiters: token -> place expiry
	Dead    string // <lock>:dead     the ledger of marks on tokens: member -> until (server ms); see lib_queue.lua
	*KindKeys

	// Set by Client.keys: where releases wake the lock's waiters, and the
	// keys of a mutex's scripts (a Mutex's, a FairMutex's, an Election's),
	// boxed once for their calls.
	Wake       *WakeTo
	MutexWords *[5]any // lock, fence, queue, alive, dead (an array's pointer: 16 bytes fewer than a slice per lock)

	// Hint is the mutex's contention hint (doc.go, "Fast scripts"):
	// until when (sinceStart) its Client takes it to be contended; one of
	// the Client's Hints, set by Client.keys (nil: no hint kept).
	Hint *atomic.Int64
}

// Contended reports whether the Client found the mutex contended within
// the last BusyFor (doc.go, "Fast scripts").
func (k *Keys) Contended() bool { return k.Hint != nil && k.Hint.Load() > sinceStart() }

// busy marks the mutex contended for BusyFor from now.
func (k *Keys) busy() {
	if k.Hint != nil {
		k.Hint.Store(sinceStart() + int64(BusyFor))
	}
}

// Hints are a Client's contention hints, shared by every handle of a
// lock (a program that makes its handle anew at each Lock keeps its
// hint): a fixed table that lock names hash into, so that it never grows.
// Two names that share a slot share a hint, which costs at most a round
// trip or the full scripts' price, never a grant.
type Hints struct{ slots [hintSlots]atomic.Int64 }

const hintSlots = 512 // 4 KiB a Client

// For is the hint of the lock named lock.
func (h *Hints) For(lock string) *atomic.Int64 {
	return &h.slots[maphash.String(hintSeed, lock)%hintSlots]
}

var hintSeed = maphash.MakeSeed()

// BusyFor is how long a mutex found contended is taken to be so: its
// calls go to the full scripts at once meanwhile. A lock contended a
// moment ago is likely to be again; taken wrongly for contended, it pays
// the full scripts' price (a fifth more of the server's work) meanwhile.
const BusyFor = 5 * time.Second

// sinceStart is the time since the package started, on the monotonic
// clock, in ns: a wall clock that steps does not move it.
func sinceStart() int64 { return int64(time.Since(start)) }

var start = time.Now()

// KindKeys are the keys of one kind only ("" for the others; kinds
// without keys of their own share noKindKeys).
type KindKeys struct {
	Readers   string // <lock>:readers  RWMutex: reader -> hold expiry
	RQueue    string // <lock>:rqueue   RWMutex: waiting reader -> place expiry
	RPhase    string // <lock>:rphase   RWMutex: reader admitted before the next writer -> place expiry
	Leases    string // <lock>:leases   Semaphore: holder -> hold expiry
	Permits   string // <lock>:permits  Semaphore: capacity, never expires
	Calls     string // <lock>:calls       Latch: what the current phase remembers (latch_down.lua)
	CallsPrev string // <lock>:calls:prev  Latch: what the phase before remembers
	IDs       string // <lock>:ids         Latch: an older dlock's CountDownOnce ids (latch_open.lua deletes it)
}

var noKindKeys = &KindKeys{}

// commonSuffixes are the names of the keys every kind has: the lock, its
// channel, queue, places and dead set.
var commonSuffixes = []string{"", ":ch", ":queue", ":alive", ":dead"}

// NewKeys names the keys of kind kd's lock name; its fence counter is the
// one a deployment that is not a cluster shares (FenceKey), which
// Client.keys changes on a cluster. A handle holds its keys
// for as long as it lives (a lease's, with it): so only its kind's are
// made, all in one string that the names are slices of, and a kind's own
// apart (100 000 held Mutexes of distinct names kept 805 B of keys each,
// 12 names of every kind made one by one).
func NewKeys(prefix string, kd *Kind, name string) *Keys {
	return NewKeysOf(prefix, kd, name, FenceKey(prefix, "", false))
}

// NewKeysOf is NewKeys with the fence counter given: fence, or with ""
// the counter of the lock's cluster slot.
func NewKeysOf(prefix string, kd *Kind, name, fence string) *Keys {
	base := prefix + ":{" + EscapeTag(name) + "}"
	if fence == "" {
		fence = FenceKey(prefix, base, true)
	}
	if kd.Tag != "" {
		base += ":" + kd.Tag
	}
	suffixes := append(commonSuffixes[:len(commonSuffixes):len(commonSuffixes)], kd.Own...)
	size := len(suffixes) * len(base)
	for _, sfx := range suffixes {
		size += len(sfx)
	}
	var b strings.Builder
	b.Grow(size) // exactly: a held lease keeps it
	for _, sfx := range suffixes {
		b.WriteString(base)
		b.WriteString(sfx)
	}
	all := b.String()
	names := make([]string, len(suffixes))
	for i, sfx := range suffixes {
		n := len(base) + len(sfx)
		names[i], all = all[:n], all[n:]
	}
	k := &Keys{Name: name, Lock: names[0], Fence: fence, Channel: names[1], Queue: names[2], Alive: names[3], Dead: names[4],
		KindKeys: noKindKeys}
	if kd.own != nil {
		k.KindKeys = kd.own(names[len(commonSuffixes):])
	}
	if kd.mutex {
		k.MutexWords = &[5]any{k.Lock, fenceWord(fence), k.Queue, k.Alive, k.Dead}
	}
	return k
}

// fenceWord is fence boxed as a script key, once for the locks that share
// it (every lock of a Client off a cluster: boxing it anew would cost each
// held lease 16 bytes more).
func fenceWord(fence string) any { return fenceWords.box(fence) }

var fenceWords boxCache[string]

// boxCache boxes a value as a command word (an interface), keeping the
// last one boxed: a value that most calls share — a prefix's fence
// counter, the lease TTL that most locks of a program use — is then made
// an interface once, not at every call or lock (an allocation each).
type boxCache[T comparable] struct{ last atomic.Pointer[boxed[T]] }

type boxed[T comparable] struct {
	v    T
	word any
}

func (c *boxCache[T]) box(v T) any {
	if b := c.last.Load(); b != nil && b.v == v {
		return b.word
	}
	b := &boxed[T]{v: v, word: v}
	c.last.Store(b)
	return b.word
}

// FenceKey names the counter of the lock whose key is lock: one per
// prefix, or one per hash slot on a cluster, where a script touches one
// slot's keys only; never expiring, since fences must only grow (see the
// package doc, "Fence counters").
func FenceKey(prefix, lock string, cluster bool) string {
	if !cluster {
		return prefix + ":fence"
	}
	return prefix + ":fence:{" + keyslot.Tag(keyslot.Of(lock)) + "}"
}

// tagEscaper makes any name safe inside a hash tag: Redis takes the tag to
// end at the first '}', so braces are escaped, and '%' too so that the
// mapping stays one-to-one (two names never share a key).
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func EscapeTag(name string) string { return tagEscaper.Replace(name) }

// ValidPrefix reports whether a key prefix can be used: a brace in it would
// move the hash tag out of the lock's name.
func ValidPrefix(p string) bool {
	return p != "" && !strings.ContainsAny(p, "{}")
}

// tagUnescaper undoes EscapeTag.
var tagUnescaper = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")

// ParseKey tells the kind and name of a lock from one of its keys
// (<prefix>:{<escaped name>}[:<tag>][:<part>]); ok is false for keys that
// are not a lock's, and for its dead set, which holds only refused tokens
// and receipts (of a release, of a ForceUnlock): they outlive the lock,
// which is free when nothing else of it is left, and a free lock leaves
// nothing to list.
func ParseKey(prefix, key string) (kd *Kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return nil, "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return nil, "", false
	}
	name, suffix := tagUnescaper.Replace(rest[:i]), rest[i+1:]
	if strings.HasSuffix(suffix, ":dead") {
		return nil, "", false
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(suffix, ":"), ":")
	for _, kd := range Kinds {
		if first == kd.Tag {
			return kd, name, true
		}
	}
	if first == "queue" || first == "alive" { // a Mutex's, without its lock (waiters only)
		return MutexKind, name, true
	}
	return nil, "", false
}

// KeySuffixes returns the suffixes of the keys every kind has, after
// <lock>: "" (the lock itself), ":ch", ":queue", ":alive", ":dead".
func KeySuffixes() []string { return slices.Clone(commonSuffixes) }
