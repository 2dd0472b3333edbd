package drivertest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// replyCase is a command and what its reply must be.
type replyCase struct {
	name  string
	cmd   driver.Command
	check func(r driver.Reply) error
}

// is checks for exactly v.
func is(v any) func(driver.Reply) error {
	return func(r driver.Reply) error {
		if r.Err != nil || !reflect.DeepEqual(r.Val, v) {
			return fmt.Errorf("got %#v, %v; want %#v", r.Val, r.Err, v)
		}
		return nil
	}
}

// refused checks for an error reply whose text starts with prefix.
func refused(prefix string) func(driver.Reply) error {
	return func(r driver.Reply) error {
		if !isReply(r.Err) || !strings.HasPrefix(r.Err.Error(), prefix) {
			return fmt.Errorf("got %#v, %v; want an ErrorReply starting %q", r.Val, r.Err, prefix)
		}
		return nil
	}
}

// isReply reports whether err is, or wraps, a *driver.ErrorReply.
func isReply(err error) bool {
	_, ok := errors.AsType[*driver.ErrorReply](err)
	return ok
}

// pairs checks for a map's keys and values in turn, in any order of pairs.
func pairs(kv ...string) func(driver.Reply) error {
	return func(r driver.Reply) error {
		vs, err := r.Slice()
		if err != nil || len(vs) != len(kv) {
			return fmt.Errorf("got %#v, %v; want the pairs %q", r.Val, r.Err, kv)
		}
		got := map[any]any{}
		for i := 0; i+1 < len(vs); i += 2 {
			got[vs[i]] = vs[i+1]
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if got[kv[i]] != kv[i+1] {
				return fmt.Errorf("got %#v; want the pairs %q", r.Val, kv)
			}
		}
		return nil
	}
}

// replyCases are commands whose replies have every shape. The setup
// commands come first: the cases run in order.
func replyCases(t *testing.T) []replyCase {
	k := key(t)
	str, num, list, hash, zset := k+":s", k+":n", k+":l", k+":h", k+":z"
	return []replyCase{
		{"simple string", keyed("SET", str, "v"), is("OK")},
		{"bulk string", keyed("GET", str), is("v")},
		{"nil", keyed("GET", k+":missing"), is(nil)},
		{"integer", keyed("INCR", num), is(int64(1))},
		{"integer as a word", keyed("INCRBY", num, int64(41)), is(int64(42))},
		{"array", keyed("RPUSH", list, "a", "b"), is(int64(2))},
		{"array of strings", keyed("LRANGE", list, 0, -1), is([]any{"a", "b"})},
		{"empty array", keyed("LRANGE", k+":missing", 0, -1), is([]any{})},
		{"nested array with nil", script("EVAL", "return {1, 'x', false, {2, 'y'}}", []string{k}),
			is([]any{int64(1), "x", nil, []any{int64(2), "y"}})},
		{"map", keyed("HSET", hash, "f", "v"), is(int64(1))},
		{"map as pairs", keyed("HGETALL", hash), pairs("f", "v")},
		{"config map as pairs", cmd("CONFIG", "GET", "maxmemory-policy"), pairs("maxmemory-policy", "noeviction")},
		{"double", keyed("ZADD", zset, "1.5", "m"), is(int64(1))},
		{"double reply", keyed("ZSCORE", zset, "m"), func(r driver.Reply) error {
			if r.Err != nil || (r.Val != 1.5 && r.Val != "1.5") {
				return fmt.Errorf("got %#v, %v; want 1.5 (RESP3) or \"1.5\" (RESP2)", r.Val, r.Err)
			}
			return nil
		}},
		{"text (a verbatim string in RESP3)", cmd("INFO", "server"), func(r driver.Reply) error {
			s, err := r.Text()
			if err != nil || !strings.HasPrefix(s, "# Server") || !strings.Contains(s, "redis_version:") {
				return fmt.Errorf("got %.40q, %v; want INFO's text starting with \"# Server\"", s, err)
			}
			return nil
		}},
		{"error reply", keyed("INCR", str), refused("")},
		{"script error reply", script("EVAL", "return redis.error_reply('MYERR boom')", []string{k}), refused("MYERR boom")},
		{"NOSCRIPT", script("EVALSHA", strings.Repeat("0", 40), []string{k}), refused("NOSCRIPT")},
	}
}

// testReplies: Do returns every reply shape in neutral values.
func testReplies(t *testing.T, d driver.Driver) {
	for _, c := range replyCases(t) {
		if err := c.check(d.Do(context.Background(), c.cmd)); err != nil {
			t.Errorf("%s: %v: %v", c.name, c.cmd.Args, err)
		}
	}
}

// testPipelineReplies: a Pipeline returns the same replies, in order, an
// error reply failing only its own command.
func testPipelineReplies(t *testing.T, d driver.Driver) {
	cases := replyCases(t)
	cmds := make([]driver.Command, len(cases))
	for i, c := range cases {
		cmds[i] = c.cmd
	}
	rs := d.Pipeline(context.Background(), cmds)
	if len(rs) != len(cases) {
		t.Fatalf("Pipeline of %d commands returned %d replies", len(cases), len(rs))
	}
	for i, c := range cases {
		if err := c.check(rs[i]); err != nil {
			t.Errorf("%s: %v: %v", c.name, c.cmd.Args, err)
		}
	}
}

// newScript returns a script that no server has seen yet and its SHA1.
func newScript(t *testing.T) (src, sha string) {
	src = fmt.Sprintf("-- %s\nreturn {KEYS[1], ARGV[1]}", key(t))
	sum := sha1.Sum([]byte(src))
	return src, hex.EncodeToString(sum[:])
}

// testScripts: EVALSHA fails with NOSCRIPT until the script is loaded,
// EVAL loads it, and both come back with the script's reply, alone and
// in a pipeline.
func testScripts(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	src, sha := newScript(t)
	k := key(t)
	want := []any{k, "arg"}
	if err := refused("NOSCRIPT")(d.Do(ctx, script("EVALSHA", sha, []string{k}, "arg"))); err != nil {
		t.Fatalf("EVALSHA of a new script: %v", err)
	}
	if err := is(want)(d.Do(ctx, script("EVAL", src, []string{k}, "arg"))); err != nil {
		t.Fatalf("EVAL: %v", err)
	}
	rs := d.Pipeline(ctx, []driver.Command{
		script("EVALSHA", sha, []string{k}, "arg"),
		script("EVALSHA", strings.Repeat("f", 40), []string{k}, "arg"),
		script("EVALSHA", sha, []string{k}, "arg"),
	})
	for i, check := range []func(driver.Reply) error{is(want), refused("NOSCRIPT"), is(want)} {
		if err := check(rs[i]); err != nil {
			t.Errorf("pipelined EVALSHA %d: %v", i, err)
		}
	}
	if slices.ContainsFunc(rs, func(r driver.Reply) bool { return r.Err != nil && !isReply(r.Err) }) {
		t.Errorf("a NOSCRIPT reply failed the pipeline's other commands: %+v", rs)
	}
}
