package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/grants"
	"github.com/redis/go-redis/v9"
)

const checkSynopsis = "dlock check [--redis URL] [--prefix P] [--json]"

// checkCmd checks a server against what a dlock deployment needs, as the
// user of the URL: its version (internal/deploy, version.go), scripts, each command dlock sends (internal/grants), its keys and
// pub/sub channels under the prefix, an eviction policy that keeps lock
// keys, and (warnings only) persistence and replicas. It prints one line
// per check and exits 1 when something required is missing.
func checkCmd(args []string, stdout, stderr io.Writer) int {
	var a adminFlags
	fs := newFlags("check")
	a.register(fs)
	asJSON := fs.Bool("json", false, "print the checks as a JSON object")
	if code, ok := parseFlags(fs, checkSynopsis, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, checkSynopsis, "check takes no arguments")
	}
	t, err := a.options()
	if err != nil {
		return usageError(stderr, checkSynopsis, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	rdb, where, err := dial(ctx, t)
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	defer rdb.Close()
	name, v := serverName(ctx, rdb)
	out := stdout
	if *asJSON {
		out = io.Discard // the lines; the JSON at the end
	}
	fmt.Fprintf(out, "checking %s at %s for dlock (prefix %q)\n", name, where, a.prefix)
	ck := checker{rdb: rdb, prefix: a.prefix, w: out, supported: true}
	if ck.connection(ctx) {
		ck.scripts(ctx)
		ck.commands(ctx)
		ck.keys(ctx)
		ck.pubsub(ctx)
		ck.owners(ctx)
		ck.waits(ctx)
		servers, err := masters(ctx, rdb)
		if err != nil {
			ck.say(checkMissing, "cluster", "cannot list the masters: %v", err)
		}
		_, cluster := rdb.(*redis.ClusterClient)
		for _, s := range servers {
			ck.server = s
			if cluster {
				ck.node = s.Options().Addr + ": "
			}
			ck.version(ctx, cluster)
			ck.eviction(ctx)
			ck.persistence(ctx)
			ck.replicas(ctx)
		}
	}
	code := exitOK
	if ck.missing > 0 {
		fmt.Fprintf(out, "%d required check(s) failed: dlock's locks are not safe or not prompt on this server as this user\n", ck.missing)
		code = exitFail
	} else {
		fmt.Fprintln(out, "everything dlock needs is there")
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checkJSON{Server: where, Name: name, Version: v, Supported: ck.supported, Prefix: a.prefix,
			OK: ck.missing == 0, Checks: ck.results}); err != nil {
			complain(stderr, "check: writing: %v", err)
			return exitFail
		}
	}
	return code
}

// checkJSON is check --json's output.
type checkJSON struct {
	Server  string `json:"server"`
	Name    string `json:"name"`    // "Redis 7.0.15", "Valkey 9.0.0"
	Version string `json:"version"` // as the server wrote it ("" when it did not say)
	// Supported: every server checked is of a version dlock supports (or
	// it could not be told; the version check then warns).
	Supported bool          `json:"supported"`
	Prefix    string        `json:"prefix"`
	OK        bool          `json:"ok"` // no required check failed
	Checks    []checkResult `json:"checks"`
}

// checkResult is one check's outcome.
type checkResult struct {
	Outcome string `json:"outcome"`        // ok, MISSING (required), warning, info
	What    string `json:"what"`           // connection, version, scripts, commands, keys, pub/sub, owners, deadlocks, eviction, persistence, replicas, cluster
	Node    string `json:"node,omitempty"` // a cluster's master the check is of
	Detail  string `json:"detail"`
}

// checker runs the checks and prints their outcome.
type checker struct {
	rdb     redis.UniversalClient // for the checks as a Client makes its calls
	server  *redis.Client         // for the checks of one server's settings (INFO)
	node    string                // on a cluster, "ADDR: " of server, said before what is said of it
	prefix  string
	w       io.Writer
	missing int
	results []checkResult
	// supported: no server checked is of a version dlock refuses
	supported bool
}

// masters returns the servers whose settings count: each master of a
// cluster, in address order, else rdb itself.
func masters(ctx context.Context, rdb redis.UniversalClient) ([]*redis.Client, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return []*redis.Client{rdb.(*redis.Client)}, nil
	}
	var (
		mu  sync.Mutex
		out []*redis.Client
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, node)
		return nil
	})
	slices.SortFunc(out, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	return out, err
}

// Outcomes of a check.
const (
	checkOK      = "ok"
	checkMissing = "MISSING"
	checkWarning = "warning"
	checkInfo    = "info"
)

func (c *checker) say(outcome, what, format string, a ...any) {
	if outcome == checkMissing {
		c.missing++
	}
	detail := fmt.Sprintf(format, a...)
	c.results = append(c.results, checkResult{Outcome: outcome, What: what, Node: strings.TrimSuffix(c.node, ": "), Detail: detail})
	fmt.Fprintf(c.w, "  %-8s %-12s %s%s\n", outcome, what, c.node, detail)
}

// key returns a fresh key under the prefix, in one slot ({dlock-check}).
func (c *checker) key(suffix string) string {
	return c.prefix + ":{dlock-check}:" + suffix
}

// commandTries says how check runs each command dlock sends
// (internal/grants) as its user, harmlessly: its words, where $h $z $n $s
// $r $u stand for scratch keys of the prefix in one slot (a hash, a
// sorted set, a counter, a string, a RENAME's target, a ZUNIONSTORE's),
// $c for a channel there, $p for a SCAN pattern of them, $db and $name
// for the check's own connection's database and name. Any reply but
// a refusal (NOPERM; in a script, "can't run this command") says the user
// may run it: an error of the command's own ("no such key") is a yes, and
// so the tries need no keys set up. nil: the pub/sub check tries it.
var commandTries = map[string][]string{
	"eval":             {"EVAL", "return 1", "0"},
	"evalsha":          {"EVALSHA", sha1hex("return 1"), "0"},
	"publish":          {"PUBLISH", "$c", "check"},
	"subscribe":        nil,
	"unsubscribe":      nil,
	"ping":             {"PING"},
	"time":             {"TIME"},
	"exists":           {"EXISTS", "$s"},
	"get":              {"GET", "$s"},
	"set":              {"SET", "$s", "1", "PX", "10000"},
	"del":              {"DEL", "$s"},
	"incr":             {"INCR", "$n"},
	"decr":             {"DECR", "$n"},
	"rename":           {"RENAME", "$s", "$r"},
	"pexpire":          {"PEXPIRE", "$n", "10000"},
	"pttl":             {"PTTL", "$n"},
	"hget":             {"HGET", "$h", "f"},
	"hgetall":          {"HGETALL", "$h"},
	"hset":             {"HSET", "$h", "f", "1"},
	"hdel":             {"HDEL", "$h", "f", "g"},
	"hexists":          {"HEXISTS", "$h", "f"},
	"zadd":             {"ZADD", "$z", "1", "m"},
	"zrem":             {"ZREM", "$z", "m"},
	"zscore":           {"ZSCORE", "$z", "m"},
	"zcard":            {"ZCARD", "$z"},
	"zrange":           {"ZRANGE", "$z", "0", "-1"},
	"zrangebyscore":    {"ZRANGEBYSCORE", "$z", "-inf", "+inf"},
	"zremrangebyscore": {"ZREMRANGEBYSCORE", "$z", "-inf", "0"},
	"zunionstore":      {"ZUNIONSTORE", "$u", "1", "$z"},
	"scan":             {"SCAN", "0", "MATCH", "$p", "COUNT", "10"},
	"incrby":           {"INCRBY", "$n", "1"},
	"type":             {"TYPE", "$s"},
	"info":             {"INFO", "memory"},
	"wait":             {"WAIT", "0", "0"}, // no replica to wait for: answers at once
	"spublish":         {"SPUBLISH", "$c", "check"},
	"ssubscribe":       nil,
	"sunsubscribe":     nil,
	"cluster|slots":    {"CLUSTER", "SLOTS"},
	"cluster|shards":   {"CLUSTER", "SHARDS"},
	"asking":           {"ASKING"},
	"command":          {"COMMAND"}, // as go-redis asks it: every command's key positions
	"watch":            {"WATCH", "$s"},
	"unwatch":          {"UNWATCH"},
	"command|info":     {"COMMAND", "INFO", "get"},
	"delex":            {"DELEX", "$s", "IFEQ", "x"},
	"delifeq":          {"DELIFEQ", "$s", "x"},
	"multi":            {"MULTI"}, // then EXEC, last (commands)
	"exec":             {"EXEC"},
	"select":           {"SELECT", "$db"},              // the database the check is on: nothing changes
	"client|setname":   {"CLIENT", "SETNAME", "$name"}, // the check's own connection's name
}

// checkScript runs the tries of the commands dlock's scripts call, each
// with pcall: ARGV is, for each, its name, its number of words, then the
// words, where "$1".."$6" are KEYS[1..6]; it returns "name: error" of
// each that failed.
const checkScript = `
local refused = {}
local i = 1
while i <= #ARGV do
  local name, n = ARGV[i], tonumber(ARGV[i+1])
  local words = {}
  for j = 1, n do
    local w = ARGV[i+1+j]
    local k = string.match(w, '^%$(%d)$')
    if k then w = KEYS[tonumber(k)] end
    words[j] = w
  end
  local r = redis.pcall(unpack(words))
  if type(r) == 'table' and r.err then
    table.insert(refused, name .. ': ' .. r.err)
  end
  i = i + 2 + n
end
redis.pcall('DEL', unpack(KEYS))
return refused
`

// refusal reports whether err is the server refusing the user a command
// (not a key or a channel, nor the command's own error).
func refusal(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "permissions to run the") || strings.Contains(m, "can't run this command")
}

// connection checks that a connection can be opened at all as the user:
// one with a database other than 0 (/DB in the URL) sends SELECT first,
// and fails every command when it is refused (grants.Connection). It
// says what is missing, and returns whether nothing was (else the other
// checks, which would each fail alike, are not made).
func (c *checker) connection(ctx context.Context) bool {
	err := c.rdb.Ping(ctx).Err()
	if err == nil || !refusal(err) || !strings.Contains(err.Error(), "'select'") && !strings.Contains(err.Error(), "'client|setname'") {
		return true
	}
	c.say(checkMissing, "connection", "%v: a client with a database other than 0 (select) or a ClientName (client|setname) sends them "+
		"on every connection, and every call fails without them (grant them: ACL SETUSER <user> +select +client|setname)", err)
	return false
}

// scripts checks EVAL and EVALSHA.
func (c *checker) scripts(ctx context.Context) {
	keys := []string{c.key("h")}
	if err := c.rdb.Eval(ctx, "return 1", keys).Err(); err != nil {
		c.say(checkMissing, "scripts", "EVAL refused: %v (dlock needs Lua scripts; without them, only a plain Mutex: WithoutScripts)", err)
		return
	}
	if err := c.rdb.EvalSha(ctx, sha1hex("return 1"), keys).Err(); err != nil && !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		c.say(checkMissing, "scripts", "EVALSHA refused: %v", err)
	} else {
		c.say(checkOK, "scripts", "EVAL and EVALSHA run")
	}
}

// commands tries, as the user, every command dlock sends
// (internal/grants, commandTries) on scratch keys of the prefix: each on
// its own, and those the scripts call in a script too. A refused command
// a Client always needs is missing; one only WithoutScripts needs, a
// warning; one the server does not have (DELEX before Redis 8.4), left.
// The pub/sub commands are the pub/sub check's.
func (c *checker) commands(ctx context.Context) {
	_, cluster := c.rdb.(*redis.ClusterClient)
	slot := map[string]string{"$h": c.key("h"), "$z": c.key("z"), "$n": c.key("n"), "$s": c.key("s"), "$r": c.key("r"),
		"$u": c.key("u"), "$c": c.key("ch") + randomHex(), "$p": c.key("") + "*"}
	var node *redis.Client
	switch r := c.rdb.(type) {
	case *redis.Client:
		node = r
	case *redis.ClusterClient:
		n, err := r.MasterForKey(ctx, c.key("h"))
		if err != nil {
			c.say(checkMissing, "commands", "cannot reach the master of %s: %v", c.key("h"), err)
			return
		}
		node = n
	default:
		c.say(checkMissing, "commands", "cannot try the commands through a %T", c.rdb)
		return
	}
	conn := node.Conn() // one connection: WATCH, MULTI and EXEC are of a connection
	defer conn.Close()
	slot["$db"] = fmt.Sprint(node.Options().DB)
	slot["$name"] = cmp.Or(node.Options().ClientName, "dlock-check")
	refused := map[grants.Use][]string{}
	refuse := func(cmd grants.Command) {
		if !slices.Contains(refused[cmd.Use], cmd.Name) {
			refused[cmd.Use] = append(refused[cmd.Use], cmd.Name)
		}
	}
	var inScript []any
	var tx []grants.Command
	for _, cmd := range grants.Commands {
		words, ok := commandTries[cmd.Name]
		if !ok || words == nil || (cmd.Use == grants.Cluster && !cluster) {
			continue
		}
		if cmd.Name == "multi" || cmd.Name == "exec" {
			tx = append(tx, cmd)
			continue
		}
		args := make([]any, len(words))
		for i, w := range words {
			if k, ok := slot[w]; ok {
				w = k
			}
			args[i] = w
		}
		err := conn.Do(ctx, args...).Err()
		if cmd.Only != "" && err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			continue // the server has no such command
		}
		if refusal(err) {
			refuse(cmd)
		}
		if cmd.Script {
			inScript = append(inScript, cmd.Name, len(words))
			for _, w := range words {
				if k := strings.Index("$h$z$n$s$r$u", w); len(w) == 2 && k >= 0 && k%2 == 0 {
					w = fmt.Sprintf("$%d", k/2+1) // a key: KEYS[k/2+1]
				} else if v, ok := slot[w]; ok {
					w = v // the channel
				}
				inScript = append(inScript, w)
			}
		}
	}
	for _, cmd := range tx { // MULTI, then EXEC
		if err := conn.Do(ctx, commandTries[cmd.Name][0]).Err(); refusal(err) {
			refuse(cmd)
		}
	}
	if slices.Contains(refused[grants.NoScripts], "exec") {
		conn.Do(ctx, "DISCARD") // a MULTI that EXEC did not end
	}
	// in a script, as the scripts call them (refused to a script as to
	// the user; a script that cannot run at all is the scripts check's)
	keys := []string{slot["$h"], slot["$z"], slot["$n"], slot["$s"], slot["$r"], slot["$u"]}
	res, err := c.rdb.Eval(ctx, checkScript, keys, inScript...).StringSlice()
	if err == nil {
		for _, r := range res {
			name, msg, _ := strings.Cut(r, ": ")
			for _, cmd := range grants.Commands {
				if strings.EqualFold(cmd.Name, name) && refusal(errors.New(msg)) {
					refuse(cmd)
				}
			}
		}
	}
	grant := func(names []string) string {
		return "ACL SETUSER <user> +" + strings.Join(names, " +")
	}
	if n := refused[grants.Every]; len(n) > 0 {
		c.say(checkMissing, "commands", "refused: %s: every Client needs them (grant them: %s; docs/deployments.md prints the whole grant)",
			strings.Join(n, ", "), grant(n))
	}
	if n := refused[grants.Cluster]; len(n) > 0 {
		c.say(checkMissing, "commands", "refused: %s: a cluster's Clients need them (grant them: %s)", strings.Join(n, ", "), grant(n))
	}
	if n := refused[grants.Connection]; len(n) > 0 {
		c.say(checkWarning, "commands", "refused: %s: a client with a database other than 0 (select) or a ClientName (client|setname) "+
			"sends them on every connection, and fails every call without them (grant them: %s)", strings.Join(n, ", "), grant(n))
	}
	if n := refused[grants.NoScripts]; len(n) > 0 {
		c.say(checkWarning, "commands", "refused: %s: Clients WithoutScripts need them (grant them: %s)", strings.Join(n, ", "), grant(n))
	}
	if len(refused) == 0 {
		c.say(checkOK, "commands", "every command dlock sends runs on %s:* keys, and in scripts", c.prefix)
	}
}

// keys checks plain reads and writes under the prefix (the script-free
// mode, inspection) and that keys elsewhere are not needed.
func (c *checker) keys(ctx context.Context) {
	k := c.key("plain")
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k, "1", 10*time.Second)
		p.Get(ctx, k)
		p.Type(ctx, k)
		p.Del(ctx, k)
		return nil
	})
	if err == nil {
		err = c.rdb.Scan(ctx, 0, c.prefix+":{*", 10).Err()
	}
	if err != nil {
		c.say(checkMissing, "keys", "%v (grant the keys: ACL SETUSER <user> ~%s:*)", err, c.prefix)
		return
	}
	c.say(checkOK, "keys", "read, write and SCAN on %s:*", c.prefix)
}

// pubsub subscribes to a channel under the prefix, publishes on it and
// unsubscribes: each must be allowed, and the message must arrive. On a
// cluster it does so with sharded pub/sub too, as a cluster's Clients do.
func (c *checker) pubsub(ctx context.Context) {
	if !c.pubsubRound(ctx, false) {
		return
	}
	if _, cluster := c.rdb.(*redis.ClusterClient); cluster && !c.pubsubRound(ctx, true) {
		return
	}
	c.say(checkOK, "pub/sub", "SUBSCRIBE, PUBLISH and UNSUBSCRIBE on %s:*", c.prefix)
}

// pubsubRound is one round of the pub/sub check, sharded or not; it says
// what is missing, and returns whether nothing was.
func (c *checker) pubsubRound(ctx context.Context, sharded bool) bool {
	ch := c.key("check:" + randomHex())
	sub, pub, unsub := "subscribe", "publish", "unsubscribe"
	ps := c.rdb.Subscribe(ctx, ch)
	if sharded {
		sub, pub, unsub = "ssubscribe", "spublish", "sunsubscribe"
		ps = c.rdb.SSubscribe(ctx, ch)
	}
	defer ps.Close()
	missing := func(cmd string, err error) bool {
		grant := fmt.Sprintf("(grant the channels: ACL SETUSER <user> &%s:*; without them every release wakes nobody and waits poll)", c.prefix)
		if refusal(err) {
			// the command itself is denied, not the channel
			grant = fmt.Sprintf("(grant the command: ACL SETUSER <user> +%s; without it every release wakes nobody and waits poll)", cmd)
		}
		c.say(checkMissing, "pub/sub", "%s %s: %v %s", strings.ToUpper(cmd), ch, err, grant)
		return false
	}
	confirmed := func(kind string) error {
		m, err := ps.ReceiveTimeout(ctx, 2*time.Second)
		if err != nil {
			return err
		}
		if s, ok := m.(*redis.Subscription); !ok || s.Kind != kind {
			return fmt.Errorf("unexpected reply %v", m)
		}
		return nil
	}
	if err := confirmed(sub); err != nil {
		return missing(sub, err)
	}
	var err error
	if sharded {
		err = c.rdb.SPublish(ctx, ch, "check").Err()
	} else {
		err = c.rdb.Publish(ctx, ch, "check").Err()
	}
	if err != nil {
		return missing(pub, err)
	}
	if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		c.say(checkMissing, "pub/sub", "a message published on %s did not arrive: %v", ch, err)
		return false
	}
	if sharded {
		err = ps.SUnsubscribe(ctx, ch)
	} else {
		err = ps.Unsubscribe(ctx, ch)
	}
	if err == nil {
		err = confirmed(unsub)
	}
	if err != nil {
		return missing(unsub, err)
	}
	return true
}

// owners checks the Clients' owner records, <prefix>:client:<id>: each
// Client writes its own when it first holds or waits, and inspect, top,
// dlock leader, Election.Leader and Observe read them to say who holds
// or leads. They are optional — a user granted only some locks' keys
// (~<prefix>:{<name>}*) works without them — so a refusal is a warning.
func (c *checker) owners(ctx context.Context) {
	k := c.prefix + ":client:dlock-check-" + randomHex()
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k, "host", "dlock-check")
		p.PExpire(ctx, k, 10*time.Second)
		p.HGetAll(ctx, k)
		p.Del(ctx, k)
		return nil
	})
	if err != nil {
		c.say(checkWarning, "owners", "owner records %s:client:*: %v: locks and elections work, but holders and leaders are "+
			"shown without who they are (grant them: ACL SETUSER <user> ~%s:client:*)", c.prefix, err, c.prefix)
		return
	}
	c.say(checkOK, "owners", "owner records %s:client:* read and written", c.prefix)
}

// waits checks deadlock detection's records, <prefix>:wait:<token> and
// <prefix>:deadlock:<token>: a wait that holds leases writes one, and the
// detector, Snapshot, dlock deadlocks and dlock web read them. Optional
// as the owner records are: without them deadlocks go unseen, so a
// refusal is a warning.
func (c *checker) waits(ctx context.Context) {
	id := "dlock-check-" + randomHex()
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range []string{c.prefix + ":wait:" + id, c.prefix + ":deadlock:" + id} {
			p.Set(ctx, k, "{}", 10*time.Second)
			p.Get(ctx, k)
			p.Del(ctx, k)
		}
		return nil
	})
	if err != nil {
		c.say(checkWarning, "deadlocks", "deadlock records %s:wait:* and %s:deadlock:*: %v: locks work, but no deadlock is found "+
			"(grant them: ACL SETUSER <user> ~%s:wait:* ~%s:deadlock:*)", c.prefix, c.prefix, err, c.prefix, c.prefix)
		return
	}
	c.say(checkOK, "deadlocks", "deadlock records %s:wait:* and %s:deadlock:* read and written", c.prefix, c.prefix)
}

// serverName returns what the server says it is, "Redis 7.0.15" or
// "Valkey 9.0.0", and its version as it wrote it ("" when it did not).
func serverName(ctx context.Context, rdb redis.UniversalClient) (name, version string) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "a server (version unknown: INFO server refused)", ""
	}
	s, _ := deploy.ServerOf(info)
	return s.String(), s.Text
}

// version says the server's version and whether dlock supports it, as a
// Client decides at its first Lock (internal/deploy, version.go).
func (c *checker) version(ctx context.Context, cluster bool) {
	info, err := c.server.Info(ctx, "server").Result()
	outcome, detail := versionVerdict(info, err, cluster)
	if outcome == checkMissing {
		c.supported = false
	}
	c.say(outcome, "version", "%s", detail)
}

// versionVerdict is the version check's outcome for one INFO server reply
// (or its error). On a cluster, whose Clients use sharded pub/sub by
// default, a server must have it.
func versionVerdict(info string, err error, cluster bool) (outcome, detail string) {
	oldest := deploy.Oldest() + ", or any Valkey"
	if err != nil {
		return checkWarning, fmt.Sprintf("INFO server: %v: cannot tell the version (dlock supports %s; "+
			"a Client lets an untold version be, with a warning)", err, oldest)
	}
	s, ok := deploy.ServerOf(info)
	if !ok {
		return checkWarning, fmt.Sprintf("%s: cannot read the version (dlock supports %s; "+
			"a Client lets an unreadable version be, with a warning)", s, oldest)
	}
	publish := "PUBLISH"
	if cluster {
		publish = "SPUBLISH"
	}
	if deploy.Supports(s, "PUBLISH") != nil {
		return checkMissing, fmt.Sprintf("%s: not supported (oldest supported: %s): a Client refuses it at its first Lock "+
			"(ErrUnsupportedServer); upgrade the server", s, oldest)
	}
	if deploy.Supports(s, publish) != nil {
		return checkMissing, fmt.Sprintf("%s: not supported with sharded pub/sub, a cluster's Clients' default (oldest supported: "+
			"Redis %s): a Client refuses it at its first Lock (ErrUnsupportedServer) unless made WithShardedPubSub(false); "+
			"upgrade the server", s, deploy.ShardedSince)
	}
	return checkOK, fmt.Sprintf("%s: supported (oldest supported: %s; tested here: Redis 7.0)", s, oldest)
}

// eviction checks that the server never evicts keys: not the locks',
// and not the records of the fence guards (fence/redisfence) either.
func (c *checker) eviction(ctx context.Context) {
	info, err := c.server.Info(ctx, "memory").Result()
	if err != nil {
		c.say(checkMissing, "eviction", "INFO memory: %v (cannot tell the maxmemory-policy; dlock reads it at a Client's first Lock "+
			"and a fence guard's first write)", err)
		return
	}
	policy := infoField(info, "maxmemory_policy")
	if policy != "noeviction" {
		c.say(checkMissing, "eviction", "maxmemory-policy is %s: an evicted lock lets a second owner in, an evicted fence counter "+
			"repeats fences, an evicted fence guard's record lets a stale write in and its evicted receipts answer a re-sent "+
			"write wrongly; set maxmemory-policy noeviction (dlock's Clients and fence guards refuse this server unless "+
			"WithEvictionRisk)", policy)
		return
	}
	c.say(checkOK, "eviction", "maxmemory-policy noeviction")
}

// persistence warns when a restart would forget fence counters.
func (c *checker) persistence(ctx context.Context) {
	info, err := c.server.Info(ctx, "persistence").Result()
	if err != nil {
		c.say(checkWarning, "persistence", "INFO persistence: %v", err)
		return
	}
	if infoField(info, "aof_enabled") == "1" {
		c.say(checkOK, "persistence", "AOF on: fence counters survive a restart (appendfsync always keeps the last ones too)")
		return
	}
	save := "RDB snapshots: unknown, CONFIG GET refused"
	if cfg, err := c.server.ConfigGet(ctx, "save").Result(); err == nil {
		save = "RDB save " + cfg["save"]
		if cfg["save"] == "" {
			save = "no RDB snapshots either"
		}
	}
	c.say(checkWarning, "persistence", "no AOF (%s): a restart loses locks and fence counters written since the last "+
		"snapshot, so fences can repeat; use appendonly yes for fences across restarts", save)
}

// replicas says what a failover could lose.
func (c *checker) replicas(ctx context.Context) {
	info, err := c.server.Info(ctx, "replication").Result()
	if err != nil {
		c.say(checkInfo, "replication", "INFO replication: %v", err)
		return
	}
	role, n := infoField(info, "role"), infoField(info, "connected_slaves")
	switch {
	case role != "master":
		c.say(checkWarning, "replication", "this server is a %s: dlock must talk to the primary", role)
	case n == "" || n == "0":
		c.say(checkInfo, "replication", "no replicas: a lock lives as long as this server")
	default:
		c.say(checkInfo, "replication", "%s replica(s): replication is asynchronous; WithReplicaSync(n, timeout) makes a grant wait "+
			"for n of them, so that a failover does not forget it", n)
	}
}

// randomHex returns 8 random hex digits.
func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sha1hex is the SHA1 by which EVALSHA names a script.
func sha1hex(s string) string { return redis.NewScript(s).Hash() }
