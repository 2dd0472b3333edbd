package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const checkSynopsis = "dlock check [--redis URL] [--prefix P] [--json]"

// checkCmd checks a server against what a dlock deployment needs, as the
// user of the URL: scripts, the commands the scripts call, its keys and
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
	v := serverVersion(ctx, rdb)
	if v == "" {
		v = "version unknown"
	}
	out := stdout
	if *asJSON {
		out = io.Discard // the lines; the JSON at the end
	}
	fmt.Fprintf(out, "checking Redis %s at %s for dlock (prefix %q)\n", v, where, a.prefix)
	ck := checker{rdb: rdb, prefix: a.prefix, w: out}
	ck.scripts(ctx)
	ck.keys(ctx)
	ck.pubsub(ctx)
	ck.owners(ctx)
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
		ck.eviction(ctx)
		ck.persistence(ctx)
		ck.replicas(ctx)
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
		if err := enc.Encode(checkJSON{Server: where, Version: v, Prefix: a.prefix, OK: ck.missing == 0, Checks: ck.results}); err != nil {
			complain(stderr, "check: writing: %v", err)
			return exitFail
		}
	}
	return code
}

// checkJSON is check --json's output.
type checkJSON struct {
	Server  string        `json:"server"`
	Version string        `json:"version"`
	Prefix  string        `json:"prefix"`
	OK      bool          `json:"ok"` // no required check failed
	Checks  []checkResult `json:"checks"`
}

// checkResult is one check's outcome.
type checkResult struct {
	Outcome string `json:"outcome"`        // ok, MISSING (required), warning, info
	What    string `json:"what"`           // scripts, commands, keys, pub/sub, owners, eviction, persistence, replicas, cluster
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

// scriptCommands are the commands dlock's scripts call, with arguments on
// the check's keys (KEYS[1] hash, KEYS[2] sorted set, KEYS[3] counter,
// KEYS[4] set); each is tried with pcall.
const checkScript = `
local tries = {
  {'TIME'},
  {'HSET', KEYS[1], 'f', '1'}, {'HGET', KEYS[1], 'f'}, {'HEXISTS', KEYS[1], 'f'}, {'HDEL', KEYS[1], 'f'},
  {'HGETALL', KEYS[1]}, {'HLEN', KEYS[1]},
  {'PEXPIRE', KEYS[1], '10000'}, {'PTTL', KEYS[1]}, {'EXISTS', KEYS[1]},
  {'ZADD', KEYS[2], '1', 'm'}, {'ZSCORE', KEYS[2], 'm'}, {'ZRANGE', KEYS[2], '0', '0'},
  {'ZRANGEBYSCORE', KEYS[2], '-inf', '+inf'}, {'ZCARD', KEYS[2]}, {'ZREM', KEYS[2], 'm'},
  {'INCR', KEYS[3]}, {'INCRBY', KEYS[3], '1'}, {'DECR', KEYS[3]}, {'GET', KEYS[3]}, {'SET', KEYS[3], '1'},
  {'SADD', KEYS[4], 'x'}, {'SREM', KEYS[4], 'x'},
  {'DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4]},
}
local refused = {}
for _, t in ipairs(tries) do
  local r = redis.pcall(unpack(t))
  if type(r) == 'table' and r.err then
    table.insert(refused, t[1] .. ': ' .. r.err)
  end
end
redis.pcall('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return refused
`

// scripts checks EVAL and EVALSHA, and the commands the scripts call on
// keys under the prefix.
func (c *checker) scripts(ctx context.Context) {
	keys := []string{c.key("h"), c.key("z"), c.key("n"), c.key("s")}
	res, err := c.rdb.Eval(ctx, checkScript, keys).StringSlice()
	if err != nil {
		c.say(checkMissing, "scripts", "EVAL refused: %v (dlock needs Lua scripts; without them, only a plain Mutex: WithoutScripts)", err)
		return
	}
	if err := c.rdb.EvalSha(ctx, sha1hex(checkScript), keys).Err(); err != nil {
		c.say(checkMissing, "scripts", "EVALSHA refused: %v", err)
	} else {
		c.say(checkOK, "scripts", "EVAL and EVALSHA run")
	}
	if len(res) > 0 {
		c.say(checkMissing, "commands", "refused in a script on %s:*: %s (grant them: ACL SETUSER <user> +@all, or each command)",
			c.prefix, strings.Join(res, "; "))
		return
	}
	c.say(checkOK, "commands", "every command dlock's scripts call runs on %s:* keys", c.prefix)
}

// keys checks plain reads and writes under the prefix (the script-free
// mode, inspection) and that keys elsewhere are not needed.
func (c *checker) keys(ctx context.Context) {
	k := c.key("plain")
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
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
	c.say(checkOK, "keys", "read, write, SCAN and MULTI/EXEC on %s:*", c.prefix)
}

// pubsub subscribes to a channel under the prefix and publishes on it:
// both must be allowed, and the message must arrive.
func (c *checker) pubsub(ctx context.Context) {
	ch := c.prefix + ":check:" + randomHex()
	grantOf := func(err error) string {
		if strings.Contains(err.Error(), "command") {
			// the command itself is denied, not the channel
			return "(grant the commands: ACL SETUSER <user> +@pubsub; without them every release wakes nobody and waits poll)"
		}
		return fmt.Sprintf("(grant the channels: ACL SETUSER <user> &%s:*; without them every release wakes nobody and waits poll)", c.prefix)
	}
	ps := c.rdb.Subscribe(ctx, ch)
	defer ps.Close()
	m, err := ps.ReceiveTimeout(ctx, 2*time.Second)
	if err == nil {
		if _, ok := m.(*redis.Subscription); !ok {
			err = fmt.Errorf("unexpected reply %v", m)
		}
	}
	if err != nil {
		c.say(checkMissing, "pub/sub", "SUBSCRIBE %s: %v %s", ch, err, grantOf(err))
		return
	}
	if err := c.rdb.Publish(ctx, ch, "check").Err(); err != nil {
		c.say(checkMissing, "pub/sub", "PUBLISH %s: %v %s", ch, err, grantOf(err))
		return
	}
	if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		c.say(checkMissing, "pub/sub", "a message published on %s did not arrive: %v", ch, err)
		return
	}
	c.say(checkOK, "pub/sub", "SUBSCRIBE and PUBLISH on %s:*", c.prefix)
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

// eviction checks that the server never evicts keys.
func (c *checker) eviction(ctx context.Context) {
	info, err := c.server.Info(ctx, "memory").Result()
	if err != nil {
		c.say(checkMissing, "eviction", "INFO memory: %v (cannot tell the maxmemory-policy; dlock reads it at a Client's first Lock)", err)
		return
	}
	policy := infoField(info, "maxmemory_policy")
	if policy != "noeviction" {
		c.say(checkMissing, "eviction", "maxmemory-policy is %s: an evicted lock lets a second owner in, an evicted fence counter "+
			"repeats fences; set maxmemory-policy noeviction (dlock refuses this server unless WithEvictionRisk)", policy)
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
