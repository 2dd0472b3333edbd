package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// dlock check on real servers: the shared one (default settings: nothing
// missing), an ACL user without channels, and a server used as a cache.
func TestCheck(t *testing.T) {
	// The shared server: ACL user "nochan" has keys and commands, no
	// channels (Redis 7's default); "noscript" cannot EVAL.
	admin := testClient(t)
	for user, rules := range map[string][]string{
		"nochan":   {"~dlock:*", "+@all"},
		"noscript": {"~dlock:*", "&dlock:*", "+@all", "-eval", "-evalsha"},
		// the channels, not the pub/sub commands
		"nopubsub": {"~dlock:*", "&dlock:*", "+@all", "-@pubsub"},
		// every lock's keys, not the Clients' owner records
		"noowners": {"~dlock:{*", "&dlock:*", "+@all"},
	} {
		args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
		for _, r := range rules {
			args = append(args, r)
		}
		if err := admin.Do(context.Background(), args...).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	}
	lru := redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory", "5mb", "--maxmemory-policy", "allkeys-lru"}})
	volatile := redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory", "5mb", "--maxmemory-policy", "volatile-lru"}})
	aof := redistest.StartT(t, redistest.Options{AOF: true})
	as := func(user string) string {
		return fmt.Sprintf("redis://%s:pw@%s", user, testServer.Addr())
	}
	for _, tc := range []struct {
		name, url string
		code      int
		want      []string // lines of the output, in part
		not       []string
	}{
		{"default", serverURL(), exitOK,
			[]string{"checking Redis 7.0.", "ok       version      Redis 7.0.", ": supported (oldest supported: Redis 6.0, or any Valkey",
				"ok       scripts", "ok       commands", "ok       keys", "ok       pub/sub", "ok       eviction",
				"warning  persistence", "ok       owners", "ok       deadlocks", "everything dlock needs is there"}, []string{"MISSING"}},
		{"acl without owner records", as("noowners"), exitOK,
			[]string{"ok       keys", "ok       pub/sub", "warning  owners", "~dlock:client:*", "warning  deadlocks", "~dlock:wait:*",
				"everything dlock needs is there"},
			[]string{"MISSING"}},
		{"aof", "redis://" + aof.Addr(), exitOK, []string{"ok       persistence"}, []string{"MISSING", "warning"}},
		{"acl without channels", as("nochan"), exitFail,
			[]string{"ok       keys", "MISSING  pub/sub", "&dlock:*", "1 required check(s) failed"}, nil},
		{"acl without the pub/sub commands", as("nopubsub"), exitFail,
			[]string{"MISSING  pub/sub", "+subscribe", "MISSING  commands     refused: publish"}, []string{"&dlock:*;"}},
		{"acl without scripts", as("noscript"), exitFail,
			[]string{"MISSING  scripts", "EVAL refused", "ok       pub/sub"}, nil},
		{"allkeys-lru", "redis://" + lru.Addr(), exitFail,
			[]string{"MISSING  eviction", "allkeys-lru", "maxmemory-policy noeviction", "fence guard", "stale"}, nil},
		{"volatile-lru", "redis://" + volatile.Addr(), exitFail,
			[]string{"MISSING  eviction", "volatile-lru", "maxmemory-policy noeviction", "fence guard", "receipts"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI("check", "--redis", tc.url)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(r.stdout, w) {
					t.Errorf("output has %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

// check --json: one object, every check in it, ok false with the exit
// status when one is missing.
func TestCheckJSON(t *testing.T) {
	r := runCLI("check", "--redis", serverURL(), "--json")
	var got checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK || !got.OK {
		t.Fatalf("code %d, %v: %q", r.code, err, r.stdout)
	}
	if !strings.HasPrefix(got.Name, "Redis 7.0.") || !strings.HasPrefix(got.Version, "7.0.") || !got.Supported {
		t.Errorf("name %q, version %q, supported %v: want a supported Redis 7.0", got.Name, got.Version, got.Supported)
	}
	seen := map[string]bool{}
	for _, c := range got.Checks {
		seen[c.What] = true
	}
	for _, w := range []string{"version", "scripts", "commands", "keys", "pub/sub", "eviction", "persistence"} {
		if !seen[w] {
			t.Errorf("no %q check in %+v", w, got.Checks)
		}
	}
	lru := redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	r = runCLI("check", "--redis", "redis://"+lru.Addr(), "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitFail || got.OK {
		t.Fatalf("allkeys-lru: code %d, %v: %q", r.code, err, r.stdout)
	}
}

// The version check's verdict on what a server may report (only 7.0 is
// installed here: the others as INFO server would write them): before
// Redis 6.0 missing; Redis 6 on a cluster missing (sharded pub/sub is
// 7.0's); every Valkey ok; a version that cannot be read or asked, a
// warning, as a Client lets it be.
func TestCheckVersionVerdict(t *testing.T) {
	info := func(redis, valkey string) string {
		s := "# Server\r\nredis_version:" + redis + "\r\n"
		if valkey != "" {
			s += "server_name:valkey\r\nvalkey_version:" + valkey + "\r\n"
		}
		return s
	}
	for _, tc := range []struct {
		info    string
		err     error
		cluster bool
		outcome string
		want    string
	}{
		{info("5.0.14", ""), nil, false, checkMissing, "Redis 5.0.14: not supported (oldest supported: Redis 6.0, or any Valkey)"},
		{info("6.0.16", ""), nil, false, checkOK, "Redis 6.0.16: supported"},
		{info("6.0.16", ""), nil, true, checkMissing, "WithShardedPubSub(false)"},
		{info("6.2.0", ""), nil, false, checkOK, "Redis 6.2.0: supported"},
		{info("6.2.14", ""), nil, true, checkMissing, "Redis 6.2.14: not supported with sharded pub/sub"},
		{info("7.0.15", ""), nil, true, checkOK, "Redis 7.0.15: supported"},
		{info("7.2.4", ""), nil, false, checkOK, "Redis 7.2.4: supported"},
		{info("8.4.0", ""), nil, true, checkOK, "Redis 8.4.0: supported"},
		{info("7.2.4", "8.0.1"), nil, true, checkOK, "Valkey 8.0.1: supported"},
		{info("7.2.4", "9.0.0"), nil, false, checkOK, "Valkey 9.0.0: supported"},
		{info("garbage", ""), nil, false, checkWarning, "Redis garbage: cannot read the version"},
		{"", errors.New("NOPERM this user has no permissions to run the 'info' command"), false, checkWarning, "cannot tell the version"},
	} {
		outcome, detail := versionVerdict(tc.info, tc.err, tc.cluster)
		if outcome != tc.outcome || !strings.Contains(detail, tc.want) {
			t.Errorf("%q (cluster %v): %s %q; want %s with %q", tc.info, tc.cluster, outcome, detail, tc.outcome, tc.want)
		}
	}
}
