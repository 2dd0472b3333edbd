package dlock

import (
	"strings"
)

// keys names everything one lock uses in Redis. All of it carries the same
// hash tag, {<escaped name>}, so that on a Redis Cluster the lock's keys and
// its channel live in one slot and one script may touch them all.
type keys struct {
	name    string // the user's lock name, for messages
	lock    string // <prefix>:{<name>}        the lock itself
	fence   string // <prefix>:{<name>}:fence  fencing counter, never expires
	channel string // <prefix>:{<name>}:ch     release notifications
	queue   string // <prefix>:{<name>}:queue  waiters: token -> arrival
	alive   string // <prefix>:{<name>}:alive  waiters: token -> place expiry
	readers string // <prefix>:{<name>}:readers  RWMutex: reader -> hold expiry
	leases  string // <prefix>:{<name>}:leases   Semaphore: holder -> hold expiry
	permits string // <prefix>:{<name>}:permits  Semaphore: capacity, never expires
	ids     string // <prefix>:{<name>}:ids      Latch: ids that counted down
}

func newKeys(prefix, name string) keys {
	base := prefix + ":{" + escapeTag(name) + "}"
	return keys{
		name:    name,
		lock:    base,
		fence:   base + ":fence",
		channel: base + ":ch",
		queue:   base + ":queue",
		alive:   base + ":alive",
		readers: base + ":readers",
		leases:  base + ":leases",
		permits: base + ":permits",
		ids:     base + ":ids",
	}
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

// Keys are the Redis names of a lock, for tools that inspect or
// administer locks by hand (cmd/dlock does) and for ACL rules. All of them
// share the hash tag {<escaped name>}: '%', '{' and '}' in the name are
// escaped as %25, %7B and %7D.
type Keys struct {
	Lock    string // the lock: a hash of owner token -> hold count (a string WithoutScripts)
	Fence   string // the fencing counter; never expires
	Channel string // the pub/sub channel releases are published on
}

// KeysOf returns the Keys of the lock called name, as a Client made
// WithPrefix(prefix) names them. It returns an error matching
// ErrInvalidArgument for an empty name, or a prefix that New refuses.
func KeysOf(prefix, name string) (Keys, error) {
	if !validPrefix(prefix) {
		return Keys{}, invalid("key prefix %q: must be non-empty, without '{' or '}'", prefix)
	}
	if name == "" {
		return Keys{}, invalid("empty lock name")
	}
	k := newKeys(prefix, name)
	return Keys{Lock: k.lock, Fence: k.fence, Channel: k.channel}, nil
}
