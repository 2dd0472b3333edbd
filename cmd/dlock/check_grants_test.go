package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/grants"
	"github.com/dlock-go/dlock/internal/redistest"
)

// dlock check passes a user with exactly the documented grant (the one
// list docs/deployments.md prints, internal/grants), and fails, naming
// the command, a user given that grant less any one command of it.
func TestCheckNamesEachDeniedCommand(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	admin := s.Client()
	defer admin.Close()
	ctx := context.Background()
	grant := func(minus string) {
		t.Helper()
		var args []any
		for _, w := range strings.Fields(grants.Line("app", "pw", "dlock", grants.Every)) {
			args = append(args, w)
		}
		if minus != "" {
			args = append(args, "-"+minus)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := fmt.Sprintf("redis://app:pw@%s", s.Addr())
	grant("")
	if r := runCLI("check", "--redis", url); r.code != exitOK {
		t.Errorf("the documented grant: exit %d, want %d:\n%s%s", r.code, exitOK, r.stdout, r.stderr)
	}
	for _, c := range grants.Of(grants.Every) {
		t.Run(c.Name, func(t *testing.T) {
			grant(c.Name)
			r := runCLI("check", "--redis", url)
			word := regexp.MustCompile(`(^|[^a-z|])` + regexp.QuoteMeta(c.Name) + `([^a-z|]|$)`)
			named := false
			for _, line := range strings.Split(r.stdout, "\n") {
				named = named || strings.Contains(line, "MISSING") && word.MatchString(line)
			}
			if r.code != exitFail || !named {
				t.Errorf("the documented grant less %s: exit %d, want %d, with a MISSING line naming it:\n%s%s",
					c.Name, r.code, exitFail, r.stdout, r.stderr)
			}
		})
	}
	grant("")
}

// Every command of the list has a try in dlock check (commandTries), or
// is tried by its pub/sub check.
func TestCheckTriesEveryCommand(t *testing.T) {
	for _, c := range grants.Commands {
		if _, ok := commandTries[c.Name]; !ok {
			t.Errorf("dlock check does not try %s", c.Name)
		}
	}
	for name := range commandTries {
		found := false
		for _, c := range grants.Commands {
			found = found || c.Name == name
		}
		if !found {
			t.Errorf("dlock check tries %s, which internal/grants does not list", name)
		}
	}
}

// On a cluster, the documented grant of a cluster's Clients passes, and
// that grant less any one of the commands only a cluster's Clients send
// fails, naming it.
func TestCheckNamesEachDeniedClusterCommand(t *testing.T) {
	c := testCluster(t)
	ctx := context.Background()
	user := "app" + randomHex()
	grant := func(minus string) {
		t.Helper()
		var args []any
		for _, w := range strings.Fields(grants.Line(user, "pw", "dlock", grants.Every, grants.Cluster)) {
			args = append(args, w)
		}
		if minus != "" {
			args = append(args, "-"+minus)
		}
		for _, n := range c.Nodes() {
			admin := n.Client()
			err := admin.Do(ctx, args...).Err()
			admin.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			admin := n.Client()
			admin.Do(ctx, "ACL", "DELUSER", user)
			admin.Close()
		}
	})
	url := fmt.Sprintf("redis+cluster://%s:pw@%s", user, c.Nodes()[0].Addr())
	grant("")
	if r := runCLI("check", "--redis", url); r.code != exitOK {
		t.Errorf("the documented grant: exit %d, want %d:\n%s%s", r.code, exitOK, r.stdout, r.stderr)
	}
	for _, cmd := range grants.Of(grants.Cluster) {
		t.Run(cmd.Name, func(t *testing.T) {
			grant(cmd.Name)
			r := runCLI("check", "--redis", url)
			word := regexp.MustCompile(`(^|[^a-z|])` + regexp.QuoteMeta(cmd.Name) + `([^a-z|]|$)`)
			named := false
			for _, line := range strings.Split(r.stdout, "\n") {
				named = named || strings.Contains(line, "MISSING") && word.MatchString(line)
			}
			if r.code != exitFail || !named {
				t.Errorf("the documented grant less %s: exit %d, want %d, with a MISSING line naming it:\n%s%s",
					cmd.Name, r.code, exitFail, r.stdout, r.stderr)
			}
		})
	}
	grant("")
}

// A client with a database other than 0 or a ClientName needs SELECT and
// CLIENT SETNAME (grants.Connection): dlock check warns, naming both,
// when the user lacks them (on database 3, where every command then
// fails, one MISSING line says so), and says nothing of them when the
// user has
// the documented grant of such a client, which runs the check on
// database 3 too.
func TestCheckNamesTheConnectionGrant(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	admin := s.Client()
	defer admin.Close()
	ctx := context.Background()
	grant := func(uses ...grants.Use) {
		t.Helper()
		var args []any
		for _, w := range strings.Fields(grants.Line("app", "pw", "dlock", uses...)) {
			args = append(args, w)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := fmt.Sprintf("redis://app:pw@%s", s.Addr())
	warned := func(out string) bool {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "warning") && strings.Contains(line, "select") && strings.Contains(line, "client|setname") {
				return true
			}
		}
		return false
	}
	grant(grants.Every)
	if r := runCLI("check", "--redis", url); r.code != exitOK || !warned(r.stdout) {
		t.Errorf("every Client's grant alone: exit %d, want %d with a warning naming select and client|setname:\n%s%s",
			r.code, exitOK, r.stdout, r.stderr)
	}
	// on database 3 every command fails: one MISSING line says why
	if r := runCLI("check", "--redis", url+"/3"); r.code != exitFail || strings.Count(r.stdout, "MISSING") != 1 ||
		!strings.Contains(r.stdout, "MISSING  connection") || !strings.Contains(r.stdout, "+select") {
		t.Errorf("every Client's grant alone, on database 3: exit %d, want %d with one MISSING line naming +select:\n%s%s",
			r.code, exitFail, r.stdout, r.stderr)
	}
	grant(grants.Every, grants.Connection)
	for _, u := range []string{url, url + "/3"} {
		if r := runCLI("check", "--redis", u); r.code != exitOK || warned(r.stdout) || strings.Contains(r.stdout, "select") {
			t.Errorf("%s with the grant of a client with a DB and a name: exit %d, want %d and nothing said of select:\n%s%s",
				u, r.code, exitOK, r.stdout, r.stderr)
		}
	}
}
