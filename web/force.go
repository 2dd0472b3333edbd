package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/dlock-go/dlock"
)

// POST /api/force frees a lock whoever holds it (Client.ForceUnlock), as
// `dlock unlock --force` does. It is there only with Options.AllowForce;
// without, it answers 403 and changes nothing. A request must:
//
//   - come from the page itself: a browser's Sec-Fetch-Site, when sent,
//     is "same-origin", and its Origin, when sent, is this host; the body
//     is JSON and the header X-Dlock-Force is set, which no other site's
//     page can send without a CORS preflight that this handler never
//     grants;
//   - confirm: its "confirm" field repeats the lock's name (the page asks
//     for it in a confirm dialog first).
//
// A name that is not UTF-8 travels as the view shows it (Go-quoted) with
// its bytes in "name_bytes"; the two must agree.

// forceHeader is the header the page sets on a force request.
const forceHeader = "X-Dlock-Force"

// maxForceBody bounds a force request's body.
const maxForceBody = 64 << 10

// forceRequest is the body of a force request.
type forceRequest struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`    // as the view shows it
	Confirm string `json:"confirm"` // the name again
	// NameBytes is the name itself when it is not UTF-8 (the view's
	// name_bytes): Name is then its Go-quoted form
	NameBytes []byte `json:"name_bytes,omitempty"`
}

// forceReply is the answer: what the lock was just before.
type forceReply struct {
	Freed lockView `json:"freed"`
}

// force serves POST /api/force.
func (h *handler) force(w http.ResponseWriter, r *http.Request) {
	if !h.opts.AllowForce {
		forceError(w, http.StatusForbidden, "forcing is off: this page is read-only (dlock web --allow-force turns it on)")
		return
	}
	if h.c == nil { // a test's handler on a fake source
		forceError(w, http.StatusServiceUnavailable, "no Client to force with")
		return
	}
	if err := sameOrigin(r); err != nil {
		forceError(w, http.StatusForbidden, err.Error())
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		forceError(w, http.StatusUnsupportedMediaType, "want a JSON body (Content-Type: application/json)")
		return
	}
	var req forceRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxForceBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		forceError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	kind := dlock.Kind(req.Kind)
	switch {
	case !validKind(kind):
		forceError(w, http.StatusBadRequest, "unknown kind "+jsonQuote(req.Kind))
		return
	case req.Name == "":
		forceError(w, http.StatusBadRequest, "no lock name")
		return
	case req.Confirm != req.Name:
		forceError(w, http.StatusBadRequest, "not confirmed: confirm must repeat the lock's name")
		return
	}
	name := req.Name
	if req.NameBytes != nil {
		name = string(req.NameBytes)
	}
	if nameLabel(name) != req.Name { // a name not UTF-8 without its bytes, or bytes of another name
		forceError(w, http.StatusBadRequest, "name "+jsonQuote(req.Name)+" is not what name_bytes spell")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	before, err := h.c.ForceUnlock(ctx, kind, name)
	if err != nil {
		h.opts.Logger.Warn("dlock/web: forced unlock failed", "kind", kind, "name", name, "from", r.RemoteAddr, "err", err)
		forceError(w, http.StatusBadGateway, "unlock --force "+jsonQuote(req.Name)+": "+err.Error())
		return
	}
	h.opts.Logger.Warn("dlock/web: lock freed by force from the page", "kind", kind, "name", name,
		"from", r.RemoteAddr, "holders", len(before.Holders))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(forceReply{Freed: lockOf(before, time.Now(), false)})
}

// sameOrigin refuses a request that a browser says came from another
// site, or that lacks the page's header.
func sameOrigin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return errors.New("refused: a cross-site request (Sec-Fetch-Site: " + s + ")")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("refused: Origin " + jsonQuote(o) + " is not this page's host")
		}
	}
	if r.Header.Get(forceHeader) == "" {
		return errors.New("refused: the " + forceHeader + " header the page sets is missing")
	}
	return nil
}

// validKind reports whether k is one of the kinds.
func validKind(k dlock.Kind) bool {
	for _, m := range metricKinds {
		if k == m {
			return true
		}
	}
	return false
}

// forceError answers a force request with status and a JSON error.
func forceError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "dlock/web: " + msg})
}

// jsonQuote quotes s as JSON does (any bytes, safely).
func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
