package deploy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
)

// Which servers dlock supports (docs/deployments.md, "Supported servers").
// What the scripts and commands need, from the oldest:
//
//   - Redis 5.0: scripts replicated by their effects (the default from
//     5.0 on), which a script that reads TIME and then writes needs —
//     every acquire script does.
//   - Redis 6.0: ACL users (AUTH user pass, the grants that dlock check
//     tries and docs/deployments.md prints) and RESP3 (HELLO 3), which
//     rueidis and valkey-go (rueidisdlock, valkeydlock) speak by default.
//     The oldest supported: below it the CLI's checks and two of the three
//     drivers do not work, and no path of the scripts was written for it.
//   - Redis 6.2: ZADD GT (a mark never shortened: lib_queue.lua's mark).
//     Before it, ZSCORE then ZADD, in the same script.
//   - Redis 7.0: PEXPIRE NX / GT (lib_queue.lua's stretch, lib_sem.lua's
//     keep). Before it, PTTL then PEXPIRE, in the same script. And sharded
//     pub/sub (SPUBLISH, SSUBSCRIBE), which a Client on a cluster uses by
//     default (WithShardedPubSub): a cluster's masters must be 7.0 or
//     later unless it is turned off.
//   - Redis 8.4 (DELEX, SET IFEQ) and Valkey 9 (DELIFEQ, SET IFEQ): the
//     script-free Mutex (WithoutScripts) releases and renews in one
//     command instead of WATCH / MULTI / EXEC (internal/backend/plain.go,
//     which asks COMMAND INFO, not the version).
//
// Every Valkey (7.2 on) is supported: it reports redis_version 7.2.4 for
// compatibility, and valkey_version its own.
var (
	// OldestRedis is the oldest Redis supported.
	OldestRedis = Version{6, 0, 0}
	// ShardedSince is the oldest Redis with sharded pub/sub.
	ShardedSince = Version{7, 0, 0}
)

// Version is a server version: major, minor, patch.
type Version [3]int

// ParseVersion parses "7.0.15" (a missing minor or patch is 0; a suffix
// after the patch, "7.2.4-rc1", is ignored). ok is false for anything
// else.
func ParseVersion(s string) (v Version, ok bool) {
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	if len(parts) == 3 {
		// "4-rc1": the patch's leading digits
		end := 0
		for end < len(parts[2]) && parts[2][end] >= '0' && parts[2][end] <= '9' {
			end++
		}
		if end == 0 {
			return Version{}, false
		}
		parts[2] = parts[2][:end]
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || p[0] == '+' || p[0] == '-' {
			return Version{}, false
		}
		v[i] = n
	}
	return v, true
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// String is "major.minor" for a version whose patch is 0, as the docs name
// releases ("6.0"), and "major.minor.patch" otherwise.
func (v Version) String() string {
	if v[2] == 0 {
		return fmt.Sprintf("%d.%d", v[0], v[1])
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

// Server is a server as its INFO server reply describes it.
type Server struct {
	// Name is "Redis", or "Valkey" for a server that reports a
	// valkey_version.
	Name string
	// Version is the server's own version (valkey_version on a Valkey).
	Version Version
	// Compat is the Redis version it reports (redis_version): Version on
	// Redis, 7.2.4 on every Valkey so far.
	Compat Version
	// Text is the version as the server wrote it.
	Text string
}

// ServerOf reads a server from an INFO server reply (or a whole INFO).
// ok is false when the reply has no version dlock can read (a proxy's, a
// garbled one): the server cannot be told.
func ServerOf(info string) (s Server, ok bool) {
	redisText := infoField(info, "redis_version")
	compat, ok := ParseVersion(redisText)
	if valkey := infoField(info, "valkey_version"); valkey != "" {
		v, vok := ParseVersion(valkey)
		if !vok {
			return Server{Name: "Valkey", Text: valkey}, false
		}
		if !ok {
			compat = Version{7, 2, 4}
		}
		return Server{Name: "Valkey", Version: v, Compat: compat, Text: valkey}, true
	}
	if !ok {
		return Server{Name: "Redis", Text: redisText}, false
	}
	return Server{Name: "Redis", Version: compat, Compat: compat, Text: redisText}, true
}

// String names the server: "Redis 7.0.15", "Valkey 9.0.0".
func (s Server) String() string {
	if s.Text == "" {
		return s.Name + " (version unknown)"
	}
	return s.Name + " " + s.Text
}

// Oldest names the oldest supported server: "Redis 6.0" (every Valkey is
// supported).
func Oldest() string { return "Redis " + OldestRedis.String() }

// Supports returns nil when dlock supports s, for a Client that publishes
// with publish (PUBLISH, or SPUBLISH: sharded pub/sub), else an error
// matching errs.UnsupportedServer that names the server's version, the
// oldest supported and what to do.
func Supports(s Server, publish string) error {
	if s.Compat.Less(OldestRedis) {
		return fmt.Errorf("%w: %s is older than the oldest dlock supports, %s (or any Valkey): upgrade the server "+
			"(docs/deployments.md, \"Supported servers\")", errs.UnsupportedServer, s, Oldest())
	}
	if strings.EqualFold(publish, "SPUBLISH") && s.Compat.Less(ShardedSince) {
		return fmt.Errorf("%w: %s has no sharded pub/sub (SPUBLISH, Redis %s and later), which a Client on a cluster uses "+
			"by default: upgrade the server, or make the Client WithShardedPubSub(false)",
			errs.UnsupportedServer, s, ShardedSince)
	}
	return nil
}
