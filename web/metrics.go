package web

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
)

// /metrics: the state of the locks, in the Prometheus text exposition
// format (version 0.0.4), written here by hand: a dozen gauges and two
// counters do not need client_golang's registry, and the handler's module
// stays free of its dependencies. Every value comes from the shared
// snapshot (no scrape reads Redis by itself), and every family is
// always written, the per-kind ones for every kind, so that a series
// does not vanish when its locks are free.
//
// Per kind (label kind):
//
//	dlock_locks_held                    locks held (a latch: closed)
//	dlock_holders                       holders (an RWMutex's readers each; a Semaphore's holders)
//	dlock_waiters                       waiters
//	dlock_oldest_hold_age_seconds       the oldest hold's age (0: none known)
//
// The same four for each name in Options.MetricNames (labels kind and
// name, a name that is not UTF-8 Go-quoted; a name that has no lock in
// Redis has no series), named
// dlock_lock_held, dlock_lock_holders, dlock_lock_waiters and
// dlock_lock_oldest_hold_age_seconds. Then:
//
//	dlock_deadlocks                     deadlock cycles now
//	dlock_deadlocks_broken_last_hour    deadlocks broken in the last hour
//	dlock_snapshot_keys_scanned         keys the last SCAN pass walked
//	dlock_snapshot_locks_not_inspected  locks past Options.Limit (not counted above)
//	dlock_snapshot_age_seconds          age of the snapshot the values come from
//	dlock_snapshot_duration_seconds     how long the last refresh took
//	dlock_snapshots_total               refreshes (counter)
//	dlock_snapshot_errors_total         failed refreshes (counter)

// metricKinds are the kinds, in the order the metrics list them.
var metricKinds = []dlock.Kind{dlock.KindMutex, dlock.KindRWMutex, dlock.KindSemaphore, dlock.KindLatch, dlock.KindElection}

// lockStats are the four values of one kind or one lock.
type lockStats struct {
	held, holders, waiters int
	oldest                 time.Duration
}

// add counts l in, its holds' ages taken at now.
func (s *lockStats) add(l *dlock.LockInfo, now time.Time) {
	if l.Held {
		s.held++
	}
	s.holders += len(l.Holders)
	s.waiters += len(l.Waiters)
	for _, h := range l.Holders {
		if !h.Since.IsZero() {
			s.oldest = max(s.oldest, now.Sub(h.Since))
		}
	}
}

// metrics serves /metrics from a fresh snapshot: the last one if it is
// younger than the interval, else the next one.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	st, err := h.snaps.fresh(r.Context())
	if err != nil {
		http.Error(w, "dlock/web: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	writeMetrics(bw, st, h.opts.MetricNames, time.Now())
	_ = bw.Flush()
}

// writeMetrics writes the metrics of st, at now.
func writeMetrics(w *bufio.Writer, st *state, names []string, now time.Time) {
	s := st.snap
	if s == nil {
		s = &dlock.Snapshot{}
	}
	byKind := map[dlock.Kind]*lockStats{}
	for _, k := range metricKinds {
		byKind[k] = &lockStats{}
	}
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
	}
	type named struct {
		kind  dlock.Kind
		name  string
		stats lockStats
	}
	var perName []named
	for _, l := range s.Locks {
		if l == nil {
			continue
		}
		if ks, ok := byKind[l.Kind]; ok {
			ks.add(l, s.At)
		}
		if listed[l.Name] {
			n := named{kind: l.Kind, name: l.Name}
			n.stats.add(l, s.At)
			perName = append(perName, n)
		}
	}
	kindFamilies := []struct {
		name, help string
		value      func(*lockStats) float64
	}{
		{"locks_held", "Locks held (a latch: closed), by kind.", func(s *lockStats) float64 { return float64(s.held) }},
		{"holders", "Holders of the locks, by kind.", func(s *lockStats) float64 { return float64(s.holders) }},
		{"waiters", "Waiters for the locks, by kind.", func(s *lockStats) float64 { return float64(s.waiters) }},
		{"oldest_hold_age_seconds", "Age of the oldest hold whose start is known, by kind (0: none).",
			func(s *lockStats) float64 { return s.oldest.Seconds() }},
	}
	for _, f := range kindFamilies {
		family(w, "dlock_"+f.name, "gauge", f.help)
		for _, k := range metricKinds {
			sample(w, "dlock_"+f.name, f.value(byKind[k]), "kind", string(k))
		}
	}
	for _, f := range kindFamilies {
		name := "dlock_lock_" + strings.TrimPrefix(f.name, "locks_")
		family(w, name, "gauge", strings.Replace(f.help, "by kind", "of a lock listed for metrics, by kind and name", 1))
		for _, n := range perName {
			sample(w, name, f.value(&n.stats), "kind", string(n.kind), "name", nameLabel(n.name))
		}
	}
	broken := 0
	for _, d := range s.Broken {
		if d.At.IsZero() || s.At.Sub(d.At) <= time.Hour {
			broken++
		}
	}
	age := 0.0
	if st.snap != nil {
		age = max(now.Sub(st.snap.At), 0).Seconds()
	}
	for _, g := range []struct {
		name, typ, help string
		v               float64
	}{
		{"dlock_deadlocks", "gauge", "Deadlock cycles among the waits now.", float64(len(s.Deadlocks))},
		{"dlock_deadlocks_broken_last_hour", "gauge", "Deadlocks broken (a victim gave up) in the last hour.", float64(broken)},
		{"dlock_snapshot_keys_scanned", "gauge", "Keys the last SCAN pass walked.", float64(s.Keys)},
		{"dlock_snapshot_locks_not_inspected", "gauge", "Matching locks found past the limit, not inspected nor counted.", float64(s.More)},
		{"dlock_snapshot_age_seconds", "gauge", "Age of the snapshot these values come from.", age},
		{"dlock_snapshot_duration_seconds", "gauge", "How long the last refresh took.", st.took.Seconds()},
		{"dlock_snapshots_total", "counter", "Refreshes (one SCAN pass each) since the handler started.", float64(st.refreshes)},
		{"dlock_snapshot_errors_total", "counter", "Failed refreshes since the handler started.", float64(st.errors)},
	} {
		family(w, g.name, g.typ, g.help)
		sample(w, g.name, g.v)
	}
}

// family writes a family's HELP and TYPE lines.
func family(w *bufio.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// sample writes one sample: name{label="value",...} v. labels are name,
// value pairs.
func sample(w *bufio.Writer, name string, v float64, labels ...string) {
	w.WriteString(name)
	if len(labels) > 0 {
		w.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	w.WriteByte('\n')
}

// nameLabel is a lock name as a label value: the name itself when it is
// UTF-8 (the format's text is), else the name Go-quoted ("blob-\xff",
// quotes included), so that two names that differ only in bytes that
// are not UTF-8 stay two series (Prometheus drops a scrape's duplicates).
func nameLabel(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	return strconv.Quote(name)
}

// escapeLabel escapes a label value as the text format wants: \\, \"
// and \n; bytes that are not UTF-8 become U+FFFD (the format is UTF-8).
func escapeLabel(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a HELP text: \\ and \n.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
