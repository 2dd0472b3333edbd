package deploy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// infoOf is an INFO server reply as the server writes it: a Valkey's has
// redis_version (7.2.4 on every release so far) before valkey_version.
func infoOf(redis, valkey string) string {
	s := "# Server\r\nredis_version:" + redis + "\r\nredis_git_sha1:00000000\r\n"
	if valkey != "" {
		s += "server_name:valkey\r\nvalkey_version:" + valkey + "\r\n"
	}
	return s + "redis_mode:standalone\r\n"
}

// The versions a server may report, read and judged: Redis before the
// oldest supported (6.0) refused; 6.0 on accepted, but not on a cluster
// with sharded pub/sub before 7.0; every Valkey accepted (8 and 9 report
// redis_version 7.2.4); a version that cannot be read cannot be told.
func TestServerVersions(t *testing.T) {
	for _, tc := range []struct {
		info     string
		name     string // what the server is called: "Redis 7.0.15"
		readable bool
		ok       bool // supported with PUBLISH
		sharded  bool // supported with SPUBLISH (a cluster's default)
	}{
		{infoOf("5.0.14", ""), "Redis 5.0.14", true, false, false},
		{infoOf("6.0.16", ""), "Redis 6.0.16", true, true, false},
		{infoOf("6.2.0", ""), "Redis 6.2.0", true, true, false},
		{infoOf("6.2.14", ""), "Redis 6.2.14", true, true, false},
		{infoOf("7.0.15", ""), "Redis 7.0.15", true, true, true},
		{infoOf("7.2.4", ""), "Redis 7.2.4", true, true, true},
		{infoOf("8.4.0", ""), "Redis 8.4.0", true, true, true},
		{infoOf("7.2.4", "8.0.1"), "Valkey 8.0.1", true, true, true},
		{infoOf("7.2.4", "9.0.0"), "Valkey 9.0.0", true, true, true},
		{infoOf("255.255.255", ""), "Redis 255.255.255", true, true, true}, // a dev build
		{infoOf("7.4.0-rc1", ""), "Redis 7.4.0-rc1", true, true, true},
		{infoOf("garbage", ""), "Redis garbage", false, true, true},
		{infoOf("7.x", ""), "Redis 7.x", false, true, true},
		{infoOf("7.2.4", "next"), "Valkey next", false, true, true},
		{"# Server\r\nuptime_in_seconds:3\r\n", "Redis (version unknown)", false, true, true},
		{"", "Redis (version unknown)", false, true, true},
	} {
		s, readable := ServerOf(tc.info)
		if s.String() != tc.name || readable != tc.readable {
			t.Errorf("%q: ServerOf = %q, readable %v; want %q, %v", tc.info, s, readable, tc.name, tc.readable)
		}
		// what a Client decides (checkVersion): an unreadable version is
		// let be
		d, _ := logged(Config{Prefix: "p", Publish: "PUBLISH"})
		sd, _ := logged(Config{Prefix: "p", Publish: "SPUBLISH"})
		for _, c := range []struct {
			d    *Deployment
			want bool
		}{{d, tc.ok}, {sd, tc.sharded}} {
			err := c.d.checkVersion(tc.info, nil)
			if c.want != (err == nil) || (err != nil && !errors.Is(err, errs.UnsupportedServer)) {
				t.Errorf("%s with %s: %v; want supported %v", tc.name, c.d.publish, err, c.want)
			}
			if err == nil {
				continue
			}
			// the error names the version, the oldest supported, the fix
			msg := err.Error()
			want := []string{tc.name, "Redis 6.0", "upgrade"}
			if c.d.publish == "SPUBLISH" && tc.ok {
				want = []string{tc.name, "Redis 7.0", "WithShardedPubSub(false)"}
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s with %s: %q lacks %q", tc.name, c.d.publish, msg, w)
				}
			}
		}
	}
}

func TestParseVersion(t *testing.T) {
	for s, want := range map[string]Version{"6.0.16": {6, 0, 16}, "7.0": {7, 0, 0}, "8": {8, 0, 0}, " 7.2.4\r": {7, 2, 4},
		"7.4.0-rc1": {7, 4, 0}} {
		if v, ok := ParseVersion(s); !ok || v != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", s, v, ok, want)
		}
	}
	for _, s := range []string{"", "garbage", "7.x", "7..1", "-1.0.0", "+7.0.0", "7.0.x", "v7.0.0"} {
		if v, ok := ParseVersion(s); ok {
			t.Errorf("ParseVersion(%q) = %v, ok", s, v)
		}
	}
	if !(Version{6, 2, 14}).Less(Version{7, 0, 0}) || (Version{7, 0, 0}).Less(Version{7, 0, 0}) ||
		(Version{7, 0, 1}).Less(Version{7, 0, 0}) {
		t.Error("Less")
	}
	if OldestRedis.String() != "6.0" || (Version{7, 0, 15}).String() != "7.0.15" {
		t.Errorf("String: %s, %s", OldestRedis, Version{7, 0, 15})
	}
}

// A version that cannot be read (INFO refused by an ACL, a proxy's reply)
// is let be with one warning; a failure to ask is an error, and is asked
// again.
func TestVersionUntold(t *testing.T) {
	d, log := logged(Config{Prefix: "p", Publish: "PUBLISH"})
	for range 2 {
		if err := d.checkVersion("", reply("NOPERM this user has no permissions to run the 'info' command")); err != nil {
			t.Errorf("a refused INFO: %v", err)
		}
		if err := d.checkVersion(infoOf("garbage", ""), nil); err != nil {
			t.Errorf("a garbled version: %v", err)
		}
	}
	if n := strings.Count(log.String(), "cannot read the server's version"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, log)
	}
	if err := d.checkVersion("", errors.New("dial: refused")); err == nil || errors.Is(err, errs.UnsupportedServer) {
		t.Errorf("a failed INFO: %v", err)
	}
}

// counted is a node that counts the INFO server it is sent, and fails
// every call while down.
type counted struct {
	driver.Driver
	infos atomic.Int32
	down  atomic.Bool
}

func (c *counted) Masters(context.Context) ([]driver.Driver, error) { return []driver.Driver{c}, nil }

func (c *counted) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if c.down.Load() {
		out := make([]driver.Reply, len(cmds))
		for i := range out {
			out[i].Err = errors.New("node down")
		}
		return out
	}
	for _, cmd := range cmds {
		if len(cmd.Args) == 2 && cmd.Args[0] == "INFO" && cmd.Args[1] == "server" {
			c.infos.Add(1)
		}
	}
	return c.Driver.Pipeline(ctx, cmds)
}

// On the real server (7.0), the first Check reads the version and accepts
// it; later Checks read it no more. With two nodes (a quorum's), a node
// down at the first Check is read at a later one, and the other is not
// read again.
func TestVersionReadOncePerNode(t *testing.T) {
	ctx := context.Background()
	info, err := srv.Client().Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ServerOf(info)
	if !ok || Supports(s, "SPUBLISH") != nil || !strings.HasPrefix(s.String(), "Redis 7.0.") {
		t.Fatalf("this server: %v (readable %v): want a supported Redis 7.0", s, ok)
	}

	d, log := logged(Config{Prefix: "version-" + t.Name(), Publish: "PUBLISH"})
	one := &counted{Driver: attach(t, d, "")}
	d.reach.Nodes = []driver.Driver{one}
	for range 3 {
		if err := d.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := one.infos.Load(); n != 1 {
		t.Errorf("one node: INFO server sent %d times over 3 Checks, want once", n)
	}

	q, _ := logged(Config{Prefix: "version-q-" + t.Name(), Publish: "PUBLISH"})
	r := attach(t, q, "")
	a, b := &counted{Driver: r}, &counted{Driver: r}
	b.down.Store(true)
	q.Attach(Reach{Nodes: []driver.Driver{a, b}, ID: "id", Life: q.reach.Life, Background: q.reach.Background,
		Everywhere: func(ctx context.Context, c protocol.Call) error {
			var wg sync.WaitGroup
			for _, n := range []driver.Driver{a, b} {
				wg.Go(func() { _ = c.Run(ctx, n) })
			}
			wg.Wait()
			return nil
		}})
	if err := q.Check(ctx); err != nil {
		t.Fatalf("a quorum with a node down: %v", err)
	}
	b.down.Store(false)
	for range 2 {
		if err := q.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if na, nb := a.infos.Load(), b.infos.Load(); na != 1 || nb != 1 {
		t.Errorf("INFO server sent %d times to the node up, %d to the node down at first; want once each", na, nb)
	}
	if strings.Contains(log.String(), "version") {
		t.Errorf("warned of the version of a server that tells it:\n%s", log)
	}
}
