package deploy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/telemetry"
)

// logged is a Deployment whose warnings are written to the returned
// buffer (safe for concurrent logging).
func logged(cfg Config) (*Deployment, *syncBuf) {
	var b syncBuf
	cfg.Tel = telemetry.New(telemetry.Config{Logger: slog.New(slog.NewTextHandler(&b, nil))})
	return New(cfg), &b
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func reply(msg string) error { return &driver.ErrorReply{Err: errors.New(msg)} }

func TestCheckPolicy(t *testing.T) {
	d, log := logged(Config{Prefix: "p"})
	for _, info := range []string{"# Memory\r\nused_memory:1\r\n", "maxmemory_policy:noeviction\r\n"} {
		if err := d.checkPolicy(info, nil); err != nil {
			t.Errorf("%q: %v", info, err)
		}
	}
	if err := d.checkPolicy("maxmemory_policy:volatile-lru\r\n", nil); !errors.Is(err, errs.EvictionPolicy) ||
		!strings.Contains(err.Error(), "volatile-lru") {
		t.Errorf("an evicting policy: %v", err)
	}
	if err := d.checkPolicy("", errors.New("dial: refused")); err == nil || errors.Is(err, errs.EvictionPolicy) {
		t.Errorf("a failed INFO: %v", err)
	}
	// a refused INFO cannot be told: let be, said once
	for range 2 {
		if err := d.checkPolicy("", reply("NOPERM this user has no permissions to run the 'info' command")); err != nil {
			t.Errorf("a refused INFO: %v", err)
		}
	}
	if n := strings.Count(log.String(), "cannot read the server's maxmemory-policy"); n != 1 {
		t.Errorf("a refused INFO warned %d times:\n%s", n, log)
	}

	risky, log := logged(Config{Prefix: "p", EvictionRisk: true})
	for range 2 {
		if err := risky.checkPolicy("maxmemory_policy:allkeys-lru\r\n", nil); err != nil {
			t.Errorf("WithEvictionRisk: %v", err)
		}
	}
	if n := strings.Count(log.String(), "may evict lock keys"); n != 1 {
		t.Errorf("WithEvictionRisk warned %d times:\n%s", n, log)
	}
}

func TestRefusals(t *testing.T) {
	d, log := logged(Config{Prefix: "p", Publish: "PUBLISH"})
	if d.Refused() != nil {
		t.Fatal("refused before any refusal")
	}
	// a command refused is logged once; a key or a channel refused, a
	// PUBLISH refused, an error that is no reply are not
	noRun := reply("NOPERM User u has no permissions to run the 'zadd' command")
	for range 2 {
		d.CommandRefused(protocol.Cmd("ZADD", "k", 1, "m"), noRun)
	}
	d.CommandRefused(protocol.Cmd("GET", "k"), reply("NOPERM No permissions to access a key"))
	d.CommandRefused(protocol.Cmd("PUBLISH", "c", "m"), reply("NOPERM User u has no permissions to run the 'publish' command"))
	d.CommandRefused(protocol.Cmd("GET", "k"), errors.New("has no permissions to run the"))
	d.CommandRefused(protocol.Cmd("GET", "k"), nil)
	if n := strings.Count(log.String(), "may not run a command"); n != 1 {
		t.Errorf("%d warnings of a refused command:\n%s", n, log)
	}
	if d.Refused() != nil {
		t.Fatal("a refused command is not pub/sub refused")
	}
	for range 2 {
		d.PublishRefused(reply("NOPERM No permissions to access a channel"))
	}
	err := d.Refused()
	if !errors.Is(err, errs.PubSubRefused) || !strings.Contains(err.Error(), "&p:*") {
		t.Errorf("Refused: %v", err)
	}
	if n := strings.Count(log.String(), "waits poll instead of being woken"); n != 1 {
		t.Errorf("%d warnings of pub/sub refused:\n%s", n, log)
	}
}

func TestCounterNames(t *testing.T) {
	tag := keyslot.Tag(42)
	for key, want := range map[string]bool{
		"p:fence:{" + tag + "}": true,
		"p:fence:{zzzzz}":       false, // too long for a tag
		"p:fence:{}":            false,
		"p:fence:{a}x":          false,
		"q:fence:{" + tag + "}": false,
		"p:fence":               false,
	} {
		if got := slotCounter("p", key); got != want {
			t.Errorf("slotCounter(%q) = %v", key, got)
		}
	}
	for key, want := range map[string]bool{
		"p:{name}:fence":          true,
		"p:{name}:rw:fence":       true,
		"p:{name}:election:fence": true,
		"p:{name}:lock:fence":     false,
		"p:{name}":                false,
		"p:{name:fence":           false,
		"q:{name}:fence":          false,
	} {
		if got := legacyFence("p", key); got != want {
			t.Errorf("legacyFence(%q) = %v", key, got)
		}
	}
}

func TestInfoFieldAndGlob(t *testing.T) {
	info := "# Memory\r\nused_memory:10\r\nmaxmemory_policy:allkeys-lru\r\n"
	if got := infoField(info, "maxmemory_policy"); got != "allkeys-lru" {
		t.Errorf("infoField: %q", got)
	}
	if got := infoField(info, "absent"); got != "" {
		t.Errorf("infoField of an absent field: %q", got)
	}
	if got := EscapeGlob(`a*b?[c]\`); got != `a\*b\?\[c\]\\` {
		t.Errorf("EscapeGlob: %q", got)
	}
}

// attach attaches d to the shared server under a fresh prefix's keys.
func attach(t *testing.T, d *Deployment, fence string) driver.Driver {
	t.Helper()
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	r := goredis.New(rdb)
	life, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	d.Attach(Reach{Nodes: []driver.Driver{r}, Fence: fence, ID: "id",
		Everywhere: func(ctx context.Context, c protocol.Call) error { return c.Run(ctx, r).Err },
		Life:       life, Background: func(f func()) bool { wg.Go(f); return true }})
	return r
}

func TestFoldOfOlderCounters(t *testing.T) {
	ctx := context.Background()
	prefix := "fold-" + t.Name()
	d, _ := logged(Config{Prefix: prefix})
	shared := protocol.FenceKey(prefix, "", false)
	r := attach(t, d, shared)
	for k, v := range map[string]any{prefix + ":{a}:fence": 7, prefix + ":{b}:sem:fence": 12,
		prefix + ":{c}:fence": "not a counter", "other:{a}:fence": 99} {
		if err := r.Do(ctx, protocol.Keyed("SET", k, v)).Err; err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Do(ctx, protocol.Keyed("GET", shared)).Int64(); err != nil || n != 12 {
		t.Errorf("the shared counter is %d (%v), not the highest folded, 12", n, err)
	}
	if v, err := r.Do(ctx, protocol.Keyed("GET", foldMark(prefix))).Text(); err != nil || v != layoutShared {
		t.Errorf("the mark is %q (%v)", v, err)
	}
	for k, left := range map[string]bool{prefix + ":{a}:fence": false, prefix + ":{b}:sem:fence": false,
		prefix + ":{c}:fence": true, "other:{a}:fence": true} {
		if n, err := r.Do(ctx, protocol.Keyed("EXISTS", k)).Int64(); err != nil || (n == 1) != left {
			t.Errorf("%s: exists %d (%v), want left %v", k, n, err, left)
		}
	}
	_ = r.Do(ctx, protocol.Keyed("DEL", "other:{a}:fence"))
}

func TestOwnerRecord(t *testing.T) {
	ctx := context.Background()
	prefix := "owner-" + t.Name()
	d, _ := logged(Config{Prefix: prefix, Label: "the label"})
	r := attach(t, d, "")
	key := OwnerKey(prefix, "id")
	d.Announce(ctx)
	v, err := r.Do(ctx, protocol.Keyed("HGET", key, "label")).Text()
	if err != nil || v != "the label" {
		t.Fatalf("the record's label: %q (%v)", v, err)
	}
	if ttl, err := r.Do(ctx, protocol.Keyed("PTTL", key)).Int64(); err != nil || ttl <= 0 || ttl > ownerTTL.Milliseconds() {
		t.Errorf("the record's TTL: %d (%v)", ttl, err)
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d.Forget(fctx)
	if n, err := r.Do(ctx, protocol.Keyed("EXISTS", key)).Int64(); err != nil || n != 0 {
		t.Errorf("the record after Forget: exists %d (%v)", n, err)
	}

	off, _ := logged(Config{Prefix: prefix, NoOwner: true})
	attach(t, off, "")
	off.Announce(ctx)
	if n, err := r.Do(ctx, protocol.Keyed("EXISTS", key)).Int64(); err != nil || n != 0 {
		t.Errorf("NoOwner wrote a record: exists %d (%v)", n, err)
	}
}
