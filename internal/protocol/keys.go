package protocol

import (
	"strings"

	"github.com/dlock-go/dlock/internal/keyslot"
)

// Kind is a family of locks that share a layout in Redis. Each Kind has
// its own names, so that locks of different kinds called alike are
// different locks and never read each other's keys (a Semaphore("x")
// does not count a Mutex("x") holder as a permit, nor meet a WRONGTYPE).
// Mutex and FairMutex are one Kind: one lock, which both can take.
type Kind string

const (
	MutexKind     Kind = ""         // <prefix>:{<name>}...   Mutex, FairMutex
	RWKind        Kind = "rw"       // <prefix>:{<name>}:rw...  RWMutex
	SemaphoreKind Kind = "sem"      // <prefix>:{<name>}:sem... Semaphore
	LatchKind     Kind = "latch"    // <prefix>:{<name>}:latch... Latch
	ElectionKind  Kind = "election" // <prefix>:{<name>}:election... Election
)

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
	Dead    string // <lock>:dead     tokens of acquires given up on: token -> until (server ms); see bury.lua
	*KindKeys

	// Set by Client.keys: where releases Wake the lock's waiters, and the
	// keys of a mutex's scripts (a Mutex's, a FairMutex's, an Election's),
	// boxed once for their calls.
	Wake       *WakeTo
	MutexWords []any // lock, fence, queue, alive, dead
}

// KindKeys are the keys of one kind only ("" for the others, which share
// noKindKeys: a Mutex's keys carry none of them).
type KindKeys struct {
	Readers string // <lock>:readers  RWMutex: reader -> hold expiry
	RQueue  string // <lock>:rqueue   RWMutex: waiting reader -> place expiry
	RPhase  string // <lock>:rphase   RWMutex: reader admitted before the next writer -> place expiry
	Leases  string // <lock>:leases   Semaphore: holder -> hold expiry
	Permits string // <lock>:permits  Semaphore: capacity, never expires
	IDs     string // <lock>:ids      Latch: ids that counted down
}

var noKindKeys = &KindKeys{}

// keySuffixes are the names NewKeys makes of a lock's: those every kind
// has, then each kind's own.
var (
	commonSuffixes = []string{"", ":ch", ":queue", ":alive", ":dead"}
	kindSuffixes   = map[Kind][]string{
		RWKind:        {":readers", ":rqueue", ":rphase"},
		SemaphoreKind: {":leases", ":permits"},
		LatchKind:     {":ids"},
	}
)

// NewKeys names the keys of kind kd's lock name; its fence counter is the
// one a deployment that is not a cluster shares (FenceKey), which
// Client.keys changes on a cluster. A handle holds its keys
// for as long as it lives (a lease's, with it): so only its kind's are
// made, all in one string that the names are slices of, and a kind's own
// apart (100 000 held Mutexes of distinct names kept 805 B of keys each,
// 12 names of every kind made one by one).
func NewKeys(prefix string, kd Kind, name string) *Keys {
	return NewKeysOf(prefix, kd, name, FenceKey(prefix, "", false))
}

// NewKeysOf is NewKeys with the fence counter given: fence, or with ""
// the counter of the lock's cluster slot.
func NewKeysOf(prefix string, kd Kind, name, fence string) *Keys {
	base := prefix + ":{" + EscapeTag(name) + "}"
	if fence == "" {
		fence = FenceKey(prefix, base, true)
	}
	if kd != MutexKind {
		base += ":" + string(kd)
	}
	suffixes := append(commonSuffixes[:len(commonSuffixes):len(commonSuffixes)], kindSuffixes[kd]...)
	var b strings.Builder
	b.Grow(len(suffixes)*len(base) + 64)
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
	switch kd {
	case RWKind:
		k.KindKeys = &KindKeys{Readers: names[5], RQueue: names[6], RPhase: names[7]}
	case SemaphoreKind:
		k.KindKeys = &KindKeys{Leases: names[5], Permits: names[6]}
	case LatchKind:
		k.KindKeys = &KindKeys{IDs: names[5]}
	case MutexKind, ElectionKind:
		k.MutexWords = []any{k.Lock, k.Fence, k.Queue, k.Alive, k.Dead}
	}
	return k
}

// Fence counters. A lock's fences must grow, forever, across restarts of
// its Clients, so the counter they come from can never expire; one per
// lock name would leave a key behind for every name ever used (orders/42,
// orders/43, ...). So the locks share counters: off a cluster, one per key
// prefix, <prefix>:fence; on a cluster, where a script may only touch the
// keys of one slot, one per hash slot, <prefix>:fence:{<tag>}, where tag
// is a short string of the lock's slot (keyslot.Tag). The server keeps at
// most 16 384 of them, whatever the number of names. A fence is the
// shared counter's next value (next_fence in lib_queue.lua), so a lock's
// fences still only grow, though not one by one; a hold keeps its own in
// its lock's hash. Fences of an older dlock, which counted in a key per
// name (<lock>:fence), are folded into the shared counters before the
// first fence is taken (fold.go).
//
// FenceKey names the counter of the lock whose key is lock.
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
