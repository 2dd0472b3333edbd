//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestWebServes runs "dlock web" as its own process on a free port: it
// says where it serves, the snapshot shows a held lock and its label,
// /metrics has the listed name's series, the force endpoint is refused
// (no --allow-force), a Host that is not its (DNS rebinding) is refused
// while --host's is served, and SIGTERM ends it with status 0 although a page's
// feed is open.
func TestWebServes(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t)
	ctx := testCtx(t)
	l, err := labelled(t, prefix, "web-test").Mutex("web/held", dlock.WithLabel("nightly")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	cmd := exec.Command(exe, "web", "--redis", serverURL(), "--prefix", prefix, "--listen", "127.0.0.1:0",
		"--refresh", "100ms", "--metrics-names", "web/held,other", "--host", "dlock.example")
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("dlock web said nothing: %v; stderr %s", err, stderr.String())
	}
	_, rest, ok := strings.Cut(line, "http://")
	base, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.Contains(line, "read-only") {
		t.Fatalf("dlock web's first line: %q", line)
	}
	base = "http://" + strings.TrimSuffix(base, "/")

	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return string(b)
	}
	var snap struct {
		Locks []struct {
			Name    string `json:"name"`
			Holders []struct {
				Label string `json:"label"`
			} `json:"holders"`
		} `json:"locks"`
	}
	if err := json.Unmarshal([]byte(get("/api/snapshot")), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Locks) != 1 || snap.Locks[0].Name != "web/held" || len(snap.Locks[0].Holders) != 1 || snap.Locks[0].Holders[0].Label != "nightly" {
		t.Errorf("snapshot: %+v", snap)
	}
	if m := get("/metrics"); !strings.Contains(m, `dlock_lock_held{kind="mutex",name="web/held"} 1`) {
		t.Errorf("/metrics lacks the listed lock's series:\n%s", m)
	}
	if page := get("/"); !strings.Contains(page, `dlock: prefix &#34;`+prefix) {
		t.Errorf("the page's title does not name the prefix:\n%.400s", page)
	}
	// under another name (DNS rebinding): refused; under --host's: served
	for host, want := range map[string]int{"rebound.example": http.StatusMisdirectedRequest, "dlock.example:7373": 200} {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/snapshot", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %s, want %d", host, resp.Status, want)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/force", strings.NewReader(`{"kind":"mutex","name":"web/held","confirm":"web/held"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Dlock-Force", "1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("force without --allow-force: %v %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	// a page's feed stays open; SIGTERM still ends web at once, with 0
	feedCtx, closeFeed := context.WithCancel(ctx)
	defer closeFeed()
	freq, _ := http.NewRequestWithContext(feedCtx, "GET", base+"/events", nil)
	feed, err := http.DefaultClient.Do(freq)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("dlock web after SIGTERM: %v; stderr %s", err, stderr.String())
		}
	case <-time.After(webShutdown):
		t.Fatalf("dlock web still runs %v after SIGTERM, a feed open", webShutdown)
	}
}

// TestWebBadFlags: bad flags are refused with status 2 before Redis is
// contacted.
func TestWebBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"web", "--pattern", "["},
		{"web", "--refresh", "1ms"},
		{"web", "--limit", "-1"},
		{"web", "extra"},
		{"deadlocks", "extra"},
		{"deadlocks", "--prefix", "a{b"},
	} {
		if r := runCLI(append(args, "--redis", "redis://127.0.0.1:1")...); r.code != exitUsage {
			t.Errorf("%q: code %d, want %d; stderr %q", args, r.code, exitUsage, r.stderr)
		}
	}
}
