package dlock

import "github.com/dlock-go/dlock/internal/protocol"

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
	if !protocol.ValidPrefix(prefix) {
		return Keys{}, invalid("key prefix %q: must be non-empty, without '{' or '}'", prefix)
	}
	if name == "" {
		return Keys{}, invalid("empty lock name")
	}
	k := protocol.NewKeys(prefix, protocol.MutexKind, name)
	return Keys{Lock: k.Lock, Fence: k.Fence, SlotFence: protocol.FenceKey(prefix, k.Lock, true), Channel: k.Channel}, nil
}
