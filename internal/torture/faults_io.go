//go:build unix

package torture

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// Issue 45's two faults of the path between the workers and the server
// (TESTING.md, "Resets and full buffers"), on the proxies in front of the
// server that slot 0 and slot 2 of every worker reach it through
// (go-redis's pool and dlock's own connections, internal/wire, alike).

// acquireSHAs and releaseSHAs are the SHA1s of the scripts an acquire and
// a release run (EVALSHA), by which the reset fault aims at them.
var (
	acquireSHAs = shas(protocol.LockScript, protocol.LockFastScript, protocol.ElectScript, protocol.RWReadScript,
		protocol.RWWriteScript, protocol.SemAcquireScript, protocol.LockAllScript)
	releaseSHAs = shas(protocol.UnlockScript, protocol.UnlockFastScript, protocol.RWUnlockScript, protocol.SemReleaseScript)
)

func shas(ss ...protocol.Script) [][]byte {
	var out [][]byte
	for _, s := range ss {
		out = append(out, []byte(s.SHA))
	}
	return out
}

// containsAny reports whether b contains one of subs.
func containsAny(b []byte, subs [][]byte) bool {
	for _, s := range subs {
		if bytes.Contains(b, s) {
			return true
		}
	}
	return false
}

// resetFault is a restarting load balancer: on one worker's path (or, one
// time in three, every worker's), the next 1-16 chunks sent that match —
// an acquire's script (half the time), a release's (a quarter), any
// script call (a quarter) — are forwarded, run by the server, and their
// connections reset (RST) before the reply reaches the client (held
// 0.5-100 ms first, half the time), for 0.3-3 s or until the resets are
// used up; a third of the time each reset is followed by 30-300 ms in
// which new connections are refused. The proxied clients' commands go on dlock's own connections
// (internal/wire, MaxRetries 3), which send the call again; the server
// has run it once already. The workers behind those proxies run a burst
// meanwhile (resetBurst, burst.go).
func (r *runner) resetFault(rng *rand.Rand) (string, error) {
	n := 1 + rng.IntN(16)
	seed := rng.Uint64()
	d := logBetween(rng, 300*time.Millisecond, 3*time.Second)
	// Half the time the reply is held 0.5-100 ms before the reset, so
	// that a short ctx may end between the reset and the call's re-send.
	hold := time.Duration(0)
	if rng.IntN(2) == 0 {
		hold = logBetween(rng, 500*time.Microsecond, 100*time.Millisecond)
	}
	// A third of the time each reset is followed by 30-300 ms in which
	// the proxy refuses new connections (the balancer restarting): the
	// re-send finds no way to the server for a while, or none at all.
	refuse := time.Duration(0)
	if rng.IntN(3) == 0 {
		refuse = between(rng, 30*time.Millisecond, 300*time.Millisecond)
	}
	var what string
	var match func([]byte) bool
	switch k := rng.IntN(4); {
	case k < 2:
		what, match = "an acquire's script", func(b []byte) bool { return containsAny(b, acquireSHAs) }
	case k < 3:
		what, match = "a release's script", func(b []byte) bool { return containsAny(b, releaseSHAs) }
	default:
		what = "any script call"
		match = func(b []byte) bool {
			return bytes.Contains(b, []byte("EVAL")) || bytes.Contains(b, []byte("evalsha"))
		}
	}
	proxies, where := r.proxies, "every worker"
	if rng.IntN(3) > 0 {
		slot := rng.IntN(len(r.proxies))
		proxies, where = r.proxies[slot:slot+1], fmt.Sprintf("worker slot %d", slot)
	}
	// The workers behind those proxies run a burst of long-TTL holds
	// and rivals meanwhile (resetBurst), so that the resets hit them.
	r.mu.Lock()
	procs := append([]*proc(nil), r.procs...)
	r.mu.Unlock()
	for slot, p := range procs {
		if p != nil && p.alive() && (len(proxies) > 1 || r.proxies[slot] == proxies[0]) {
			p.send(fmt.Sprintf("rburst %d %d", (d + 200*time.Millisecond).Milliseconds(), seed+uint64(slot)))
		}
	}
	time.Sleep(100 * time.Millisecond)
	var disarms []func() int
	for _, p := range proxies {
		p.RefuseAfterReset(refuse)
		disarms = append(disarms, p.ResetAfterForward(n, hold, match))
	}
	time.Sleep(d)
	resets := 0
	for i, disarm := range disarms {
		resets += disarm()
		proxies[i].RefuseAfterReset(0)
	}
	time.Sleep(refuse) // the last refusal is over when the fault ends
	return fmt.Sprintf("reset: %d connection(s) of %s reset after the server ran %s, its reply held %v and dropped, new connections refused %v after each (up to %d per proxy, for %v)",
		resets, where, what, hold.Round(10*time.Microsecond), refuse.Round(time.Millisecond), n, d.Round(time.Millisecond)), nil
}

// blockedWrite makes writes block on full socket buffers: for 1-2.5 s,
// one worker's path stops reading (the proxy's Choke: its receive
// buffer, then the clients' send buffers fill), or redis-server is
// SIGSTOPped (its buffers, then the proxies', then the clients' fill).
// From just before it until it ends, the workers it reaches each run a
// burst: 12 goroutines taking long names (4-32 KiB: a few calls fill a
// connection's buffers) and short ones with 20-300 ms ctxs, on the
// proxied clients (a choke) or on every client (a server stop). The ctx
// check holds every such call to its deadline.
func (r *runner) blockedWrite(rng *rand.Rand) (string, error) {
	d := between(rng, time.Second, 2500*time.Millisecond)
	seed := rng.Uint64()
	if rng.IntN(2) == 0 {
		slot := rng.IntN(len(r.proxies))
		r.mu.Lock()
		p := r.procs[slot]
		r.mu.Unlock()
		if p != nil && p.alive() {
			p.send(fmt.Sprintf("burst %d %d 02", (d + burstLead + 200*time.Millisecond).Milliseconds(), seed))
		}
		time.Sleep(burstLead)
		release := r.proxies[slot].Choke(nil)
		time.Sleep(d)
		conns := r.proxies[slot].Conns()
		release()
		return fmt.Sprintf("blockedwrite: a path stopped reading (worker slot %d, %d proxied connections; a burst of long names and short ctxs on them) for %v",
			slot, conns, d.Round(time.Millisecond)), nil
	}
	r.mu.Lock()
	procs := append([]*proc(nil), r.procs...)
	r.mu.Unlock()
	var ids []string
	for i, p := range procs {
		if p != nil && p.alive() {
			p.send(fmt.Sprintf("burst %d %d 012", (d + burstLead + 200*time.Millisecond).Milliseconds(), seed+uint64(i)))
			ids = append(ids, p.id)
		}
	}
	time.Sleep(burstLead)
	err := r.stopServer(d)
	return fmt.Sprintf("blockedwrite: redis-server SIGSTOP for %v (a burst of long names and short ctxs on every client of workers %s)",
		d.Round(time.Millisecond), strings.Join(ids, ", ")), err
}
