package dlock

import (
	"strings"

	"github.com/dlock-go/dlock/internal/keyslot"
)

// kind is a family of locks that share a layout in Redis. Each kind has
// its own names, so that locks of different kinds called alike are
// different locks and never read each other's keys (a Semaphore("x")
// does not count a Mutex("x") holder as a permit, nor meet a WRONGTYPE).
// Mutex and FairMutex are one kind: one lock, which both can take.
type kind string

const (
	kindMutex     kind = ""         // <prefix>:{<name>}...   Mutex, FairMutex
	kindRW        kind = "rw"       // <prefix>:{<name>}:rw...  RWMutex
	kindSemaphore kind = "sem"      // <prefix>:{<name>}:sem... Semaphore
	kindLatch     kind = "latch"    // <prefix>:{<name>}:latch... Latch
	kindElection  kind = "election" // <prefix>:{<name>}:election... Election
)

// keys names everything one lock uses in Redis. All of it carries the same
// hash tag, {<escaped name>}, so that on a Redis Cluster the lock's keys and
// its channel live in one slot and one script may touch them all. Below,
// <lock> is <prefix>:{<name>} for a mutex and <prefix>:{<name>}:<kind> for
// the other kinds.
type keys struct {
	name    string // the user's lock name, for messages
	lock    string // <lock>          the lock itself
	fence   string // the fence counter the lock shares (fenceKey), never expires
	channel string // <lock>:ch       release notifications; an Election's observers
	queue   string // <lock>:queue    waiters: token -> arrival
	alive   string // <lock>:alive    waiters: token -> place expiry
	dead    string // <lock>:dead     tokens of acquires given up on: token -> until (server ms); see bury.lua
	*kindKeys

	// Set by Client.keys: where releases wake the lock's waiters, and the
	// keys of a mutex's scripts (a Mutex's, a FairMutex's, an Election's),
	// boxed once for their calls.
	wake       *wakeTo
	mutexWords []any // lock, fence, queue, alive, dead
}

// kindKeys are the keys of one kind only ("" for the others, which share
// noKindKeys: a Mutex's keys carry none of them).
type kindKeys struct {
	readers string // <lock>:readers  RWMutex: reader -> hold expiry
	rqueue  string // <lock>:rqueue   RWMutex: waiting reader -> place expiry
	rphase  string // <lock>:rphase   RWMutex: reader admitted before the next writer -> place expiry
	leases  string // <lock>:leases   Semaphore: holder -> hold expiry
	permits string // <lock>:permits  Semaphore: capacity, never expires
	ids     string // <lock>:ids      Latch: ids that counted down
}

var noKindKeys = &kindKeys{}

// keySuffixes are the names newKeys makes of a lock's: those every kind
// has, then each kind's own.
var (
	commonSuffixes = []string{"", ":ch", ":queue", ":alive", ":dead"}
	kindSuffixes   = map[kind][]string{
		kindRW:        {":readers", ":rqueue", ":rphase"},
		kindSemaphore: {":leases", ":permits"},
		kindLatch:     {":ids"},
	}
)

// newKeys names the keys of kind kd's lock name; its fence counter is the
// one a deployment that is not a cluster shares (fenceKey), which
// Client.keys changes on a cluster. A handle holds its keys
// for as long as it lives (a lease's, with it): so only its kind's are
// made, all in one string that the names are slices of, and a kind's own
// apart (100 000 held Mutexes of distinct names kept 805 B of keys each,
// 12 names of every kind made one by one).
func newKeys(prefix string, kd kind, name string) *keys {
	return newKeysOf(prefix, kd, name, fenceKey(prefix, "", false))
}

// newKeysOf is newKeys with the fence counter given: fence, or with ""
// the counter of the lock's cluster slot.
func newKeysOf(prefix string, kd kind, name, fence string) *keys {
	base := prefix + ":{" + escapeTag(name) + "}"
	if fence == "" {
		fence = fenceKey(prefix, base, true)
	}
	if kd != kindMutex {
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
	k := &keys{name: name, lock: names[0], fence: fence, channel: names[1], queue: names[2], alive: names[3], dead: names[4],
		kindKeys: noKindKeys}
	switch kd {
	case kindRW:
		k.kindKeys = &kindKeys{readers: names[5], rqueue: names[6], rphase: names[7]}
	case kindSemaphore:
		k.kindKeys = &kindKeys{leases: names[5], permits: names[6]}
	case kindLatch:
		k.kindKeys = &kindKeys{ids: names[5]}
	case kindMutex, kindElection:
		k.mutexWords = []any{k.lock, k.fence, k.queue, k.alive, k.dead}
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
// fenceKey names the counter of the lock whose key is lock.
func fenceKey(prefix, lock string, cluster bool) string {
	if !cluster {
		return prefix + ":fence"
	}
	return prefix + ":fence:{" + keyslot.Tag(keyslot.Of(lock)) + "}"
}

// tagEscaper makes any name safe inside a hash tag: Redis takes the tag to
// end at the first '}', so braces are escaped, and '%' too so that the
// mapping stays one-to-one (two names never share a key).
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escapeTag(name string) string { return tagEscaper.Replace(name) }

// validPrefix reports whether a key prefix can be used: a brace in it would
// move the hash tag out of the lock's name.
func validPrefix(p string) bool {
	return p != "" && !strings.ContainsAny(p, "{}")
}

// Keys are the Redis names of a Mutex (or FairMutex), for tools that inspect or
// administer locks by hand (cmd/dlock does) and for ACL rules. All of them
// share the hash tag {<escaped name>}: '%', '{' and '}' in the name are
// escaped as %25, %7B and %7D.
type Keys struct {
	Lock string // the lock: a hash of owner token -> hold count (a string WithoutScripts)
	// Fence is the fencing counter the lock's fences come from, off a
	// Redis Cluster: every lock of the prefix shares it. It never
	// expires.
	Fence string
	// SlotFence is the counter on a Redis Cluster: every lock of the
	// lock's hash slot shares it. It never expires.
	SlotFence string
	Channel   string // the pub/sub channel releases are published on
}

// KeysOf returns the Keys of the Mutex called name, as a Client made
// WithPrefix(prefix) names them. It returns an error matching
// ErrInvalidArgument for an empty name, or a prefix that New refuses.
func KeysOf(prefix, name string) (Keys, error) {
	if !validPrefix(prefix) {
		return Keys{}, invalid("key prefix %q: must be non-empty, without '{' or '}'", prefix)
	}
	if name == "" {
		return Keys{}, invalid("empty lock name")
	}
	k := newKeys(prefix, kindMutex, name)
	return Keys{Lock: k.lock, Fence: k.fence, SlotFence: fenceKey(prefix, k.lock, true), Channel: k.channel}, nil
}
