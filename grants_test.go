package dlock_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/grants"
)

// grantedNames is grants.Commands by name.
func grantedNames() map[string]grants.Command {
	out := map[string]grants.Command{}
	for _, c := range grants.Commands {
		out[c.Name] = c
	}
	return out
}

// Every command a script calls is in the one list (internal/grants), the
// list's script commands are each called by a script, and the only call
// whose command is not written out is lib.lua's publish (PUBLISH or
// SPUBLISH, both in the list).
func TestGrantsCoverTheScripts(t *testing.T) {
	files, err := filepath.Glob("internal/protocol/scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	literal := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z|]+)'`)
	any := regexp.MustCompile(`redis\.p?call\(`)
	granted := grantedNames()
	called := map[string]bool{}
	dynamic := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		lits := literal.FindAllStringSubmatch(src, -1)
		dynamic += len(any.FindAllString(src, -1)) - len(lits)
		for _, m := range lits {
			name := strings.ToLower(m[1])
			called[name] = true
			if c, ok := granted[name]; !ok || !c.Script {
				t.Errorf("%s calls %s, which internal/grants does not list as a script's command", f, m[1])
			}
		}
	}
	if dynamic != 1 {
		t.Errorf("%d redis.call/pcall whose command is not written out, want 1 (lib.lua's publish)", dynamic)
	}
	for _, c := range grants.Commands {
		if c.Script && !called[c.Name] && c.Name != "publish" && c.Name != "spublish" {
			t.Errorf("internal/grants says a script calls %s; none does", c.Name)
		}
	}
}

// Every command the Go side sends is in the list: every upper-case
// string literal of the library's code (the root package and the
// drivers) that names a Redis command (COMMAND LIST of the test server,
// and those of newer servers dlock knows), with its subcommand for a
// container command; every go-redis method that internal/goredis calls
// with a ctx and every rueidis builder whose name is a command. A literal that names a
// command but is no command sent is listed below, with why.
func TestGrantsCoverTheGoSide(t *testing.T) {
	ctx := context.Background()
	list, err := newRedis(t, srv).Do(ctx, "COMMAND", "LIST").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	isCommand := map[string]bool{"delex": true, "delifeq": true} // Redis 8.4, Valkey 9
	for _, c := range list {
		isCommand[strings.ToLower(c)] = true
	}
	notSent := map[string]string{
		"readonly": "errors.go: the READONLY error reply's prefix",
		// internal/goredis's hello on dlock's own connections, as go-redis
		// sends it on its own: AUTH needs no grant (SELECT and CLIENT
		// SETNAME do: grants.Connection)
		"auth": "internal/goredis: the client's credentials, as go-redis sends them",
	}
	var files []string
	for _, dir := range []string{".", "internal/goredis", "internal/protocol", "internal/transport", "internal/backend", "internal/deploy", "internal/wake", "rueidisdlock", "valkeydlock"} {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	word := regexp.MustCompile(`"([A-Z][A-Z_]+)"(?:\s*,\s*"([A-Z][A-Z_]+)")?`)
	method := regexp.MustCompile(`\.([A-Z][A-Za-z]+)\(ctx\b`)
	builder := regexp.MustCompile(`B\(\)\.([A-Z][A-Za-z]+)\(`)
	granted := grantedNames()
	sent := map[string][]string{} // command -> files
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, m := range word.FindAllStringSubmatch(src, -1) {
			name := strings.ToLower(m[1])
			if !isCommand[name] {
				continue
			}
			switch name {
			case "cluster", "command", "client", "config", "script", "acl", "object", "memory", "function":
				if m[2] == "" {
					t.Errorf("%s: %s without a subcommand the test can read", f, m[1])
					continue
				}
				name += "|" + strings.ToLower(m[2])
			}
			sent[name] = append(sent[name], f)
		}
		calls := builder // rueidis's command builders
		if filepath.Dir(f) == filepath.Join("internal", "goredis") {
			calls = method // go-redis's methods, which send a command each
		}
		{
			for _, m := range calls.FindAllStringSubmatch(src, -1) {
				if name := strings.ToLower(m[1]); isCommand[name] {
					sent[name] = append(sent[name], f)
				}
			}
		}
	}
	for name, where := range sent {
		if _, ok := granted[name]; !ok && notSent[name] == "" {
			t.Errorf("%s sends %s, which internal/grants does not list", strings.Join(slices.Compact(where), ", "), name)
		}
	}
	// what the test must see, or it reads nothing
	for _, name := range []string{"eval", "evalsha", "scan", "incrby", "info", "wait", "subscribe", "ssubscribe", "watch", "multi", "command|info", "cluster|slots"} {
		if sent[name] == nil {
			t.Errorf("the scan of the Go code did not find %s", name)
		}
	}
}

// docs/deployments.md prints the grants the list makes: for every
// Client, a cluster's, WithoutScripts', a client's with a DB or a name.
func TestGrantsDocumented(t *testing.T) {
	b, err := os.ReadFile("docs/deployments.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, uses := range [][]grants.Use{{grants.Every}, {grants.Every, grants.Cluster}, {grants.Every, grants.NoScripts}, {grants.Every, grants.Connection}} {
		line := grants.Line("app", "secret", "dlock", uses...)
		if !lines[line] {
			t.Errorf("docs/deployments.md does not print the grant of %v (internal/grants):\n%s", uses, line)
		}
	}
	// the tenant's grant (TestTenantCannotRewriteTheCounter) has every
	// Client's commands
	every := strings.Join(strings.Fields(grants.Line("app", "secret", "dlock", grants.Every))[8:], " ")
	found := false
	for l := range lines {
		if strings.HasPrefix(l, "ACL SETUSER tenant-a ") {
			found = true
			if !strings.Contains(l, " "+every+" (") {
				t.Errorf("docs/deployments.md's tenant grant lacks every Client's commands (%s):\n%s", every, l)
			}
		}
	}
	if !found {
		t.Error("docs/deployments.md prints no tenant grant")
	}
}
