package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// postForce posts a force request for the mutex name with confirm, the
// page's headers (unless bare) and extra headers; it returns the status
// and body.
func postForce(t *testing.T, srv *httptest.Server, name, confirm string, bare bool, extra ...string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(forceRequest{Kind: "mutex", Name: name, Confirm: confirm})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/api/force", strings.NewReader(string(body)))
	if !bare {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(forceHeader, "1")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// held reports whether the mutex name is held.
func held(t *testing.T, c *dlock.Client, name string) bool {
	t.Helper()
	l, err := c.Inspect(context.Background(), dlock.KindMutex, name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Held
}

// TestForceRefusedUnlessAllowed: without AllowForce the endpoint answers
// 403 to a perfect request and the lock stays held; the page's view says
// forcing is off.
func TestForceRefusedUnlessAllowed(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("stuck").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{})
	code, body := postForce(t, srv, "stuck", "stuck", false)
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("force without AllowForce: %d %s", code, body)
	}
	if !held(t, c, "stuck") {
		t.Error("the lock was freed by a page that is read-only")
	}
	if v := viewOf(t, srv); v.AllowForce {
		t.Error("the view says forcing is allowed")
	}
	rec := httptest.NewRecorder()
	New(c, Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/api/force", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/force: %d, want 405", rec.Code)
	}
}

// TestForceNeedsConfirmationAndTheSameOrigin: with AllowForce, a
// request that does not repeat the name, comes from another site, or
// lacks the page's header changes nothing; the page's own request frees
// the lock and says what it was.
func TestForceNeedsConfirmationAndTheSameOrigin(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "")
	l, err := c.Mutex("stuck", dlock.WithLabel("job-7")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	srv, _ := serve(t, c, Options{AllowForce: true})
	for _, tc := range []struct {
		what    string
		confirm string
		bare    bool
		extra   []string
		code    int
	}{
		{"no confirmation", "", false, nil, 400},
		{"another name confirmed", "stuck2", false, nil, 400},
		{"another site (Sec-Fetch-Site)", "stuck", false, []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"another site (Origin)", "stuck", false, []string{"Origin", "https://evil.example"}, 403},
		{"a form post (no header, no JSON)", "stuck", true, []string{"Content-Type", "application/x-www-form-urlencoded"}, 403},
		{"not JSON", "stuck", true, []string{forceHeader, "1", "Content-Type", "text/plain"}, 415},
	} {
		if code, body := postForce(t, srv, "stuck", tc.confirm, tc.bare, tc.extra...); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.what, code, body, tc.code)
		}
		if !held(t, c, "stuck") {
			t.Fatalf("%s: the lock was freed", tc.what)
		}
	}
	code, body := postForce(t, srv, "stuck", "stuck", false, "Origin", srv.URL, "Sec-Fetch-Site", "same-origin")
	if code != 200 {
		t.Fatalf("the page's force: %d %s", code, body)
	}
	var r forceReply
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Freed.Holders) != 1 || r.Freed.Holders[0].Label != "job-7" {
		t.Errorf("reply %s (%v)", body, err)
	}
	if held(t, c, "stuck") {
		t.Error("still held after the page forced it")
	}
}
