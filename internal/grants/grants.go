// Package grants is the one list of the Redis commands dlock sends: the
// ACL grant docs/deployments.md documents (its lines are Line's), the
// commands `dlock check` tries one by one, and what the tests hold the
// scripts (every redis.call and redis.pcall in scripts/*.lua) and the Go
// code (every command it builds) to. A command added to a script or to
// the Go side without being added here fails those tests.
package grants

import "strings"

// Use is when a Client sends a command.
type Use int

const (
	// Every Client that runs scripts (the default): its scripts, its
	// pub/sub, the fence fold (SCAN, INCRBY), the eviction check (INFO),
	// inspection, WithReplicaSync (WAIT).
	Every Use = iota
	// Sharded pub/sub (a Redis Cluster, WithShardedPubSub) and the
	// cluster client's slot map.
	Cluster
	// WithoutScripts: a transaction per acquire, compare-and-delete
	// through WATCH (or DELEX / DELIFEQ where the server has them: Only).
	NoScripts
	// A client whose options name a database other than 0 (SELECT) or a
	// ClientName (CLIENT SETNAME): go-redis sends them on every
	// connection it opens (its pool's and its pub/sub's), and so do
	// dlock's own connections, which follow the client's options.
	Connection
)

// Command is one Redis command, as ACL SETUSER names it (lower case,
// "container|subcommand").
type Command struct {
	Name   string
	Use    Use
	Script bool   // a script calls it (dlock check tries it in a script too)
	Only   string // a server that has it; "" for every Redis 7 (the rule is left out elsewhere: ACL refuses an unknown name)
}

// Commands is every command dlock's Clients send, in the order the
// documented grants list them.
var Commands = []Command{
	// scripts and their publishes
	{Name: "eval", Use: Every},
	{Name: "evalsha", Use: Every},
	{Name: "publish", Use: Every, Script: true},
	{Name: "subscribe", Use: Every},
	{Name: "unsubscribe", Use: Every},
	// go-redis pings an idle subscription (ChannelWithSubscriptions's
	// health check) and reconnects it when the PING is refused
	{Name: "ping", Use: Every},
	// what the scripts call
	{Name: "time", Use: Every, Script: true},
	{Name: "exists", Use: Every, Script: true},
	{Name: "get", Use: Every, Script: true},
	{Name: "set", Use: Every, Script: true},
	{Name: "del", Use: Every, Script: true},
	{Name: "incr", Use: Every, Script: true},
	{Name: "decr", Use: Every, Script: true},
	{Name: "rename", Use: Every, Script: true},
	{Name: "pexpire", Use: Every, Script: true},
	{Name: "pttl", Use: Every, Script: true},
	{Name: "hget", Use: Every, Script: true},
	{Name: "hgetall", Use: Every, Script: true},
	{Name: "hset", Use: Every, Script: true},
	{Name: "hdel", Use: Every, Script: true},
	{Name: "hexists", Use: Every, Script: true},
	{Name: "zadd", Use: Every, Script: true},
	{Name: "zrem", Use: Every, Script: true},
	{Name: "zscore", Use: Every, Script: true},
	{Name: "zcard", Use: Every, Script: true},
	{Name: "zrange", Use: Every, Script: true},
	{Name: "zrangebyscore", Use: Every, Script: true},
	{Name: "zremrangebyscore", Use: Every, Script: true},
	{Name: "zunionstore", Use: Every, Script: true},
	// the Go side's own: the fold, the eviction check, inspection,
	// WithReplicaSync
	{Name: "scan", Use: Every},
	{Name: "incrby", Use: Every},
	{Name: "type", Use: Every},
	{Name: "info", Use: Every},
	{Name: "wait", Use: Every},
	// a cluster
	{Name: "spublish", Use: Cluster, Script: true},
	{Name: "ssubscribe", Use: Cluster},
	{Name: "sunsubscribe", Use: Cluster},
	{Name: "cluster|slots", Use: Cluster},
	{Name: "cluster|shards", Use: Cluster},
	// a command sent on to the master a slot is being migrated to (an
	// ASK reply) goes after ASKING, by go-redis or by dlock's own
	// connections (internal/goredis/cluster.go)
	{Name: "asking", Use: Cluster},
	// go-redis's cluster client reads every command's key positions
	// (COMMAND) to route them
	{Name: "command", Use: Cluster},
	// WithoutScripts
	{Name: "multi", Use: NoScripts},
	{Name: "exec", Use: NoScripts},
	{Name: "watch", Use: NoScripts},
	{Name: "unwatch", Use: NoScripts},
	{Name: "command|info", Use: NoScripts},
	{Name: "delex", Use: NoScripts, Only: "Redis 8.4"},
	{Name: "delifeq", Use: NoScripts, Only: "Valkey 9"},
	// a client's DB and ClientName
	{Name: "select", Use: Connection},
	{Name: "client|setname", Use: Connection},
}

// Of returns the commands of uses, in Commands' order; those a server
// may lack (Only) are left out.
func Of(uses ...Use) []Command {
	var out []Command
	for _, c := range Commands {
		for _, u := range uses {
			if c.Use == u && c.Only == "" {
				out = append(out, c)
			}
		}
	}
	return out
}

// Line is the ACL SETUSER command, as docs/deployments.md prints it, that
// gives user (password secret) the keys and channels of prefix and
// exactly the commands of uses.
func Line(user, secret, prefix string, uses ...Use) string {
	words := []string{"ACL", "SETUSER", user, "reset", "on", ">" + secret, "~" + prefix + ":*", "&" + prefix + ":*"}
	for _, c := range Of(uses...) {
		words = append(words, "+"+c.Name)
	}
	return strings.Join(words, " ")
}
