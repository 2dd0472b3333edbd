package web

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseMetrics parses a /metrics body with Prometheus's own text parser.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses /metrics: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the sample of family name whose labels
// are all of labels (name, value pairs); ok is false if there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels)/2 {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsOfAHeldLockAndItsWaiter: a Mutex held for a while and
// waited for, and a Semaphore held, as Prometheus's parser reads
// /metrics: per kind, and per name for the listed name only.
func TestMetricsOfAHeldLockAndItsWaiter(t *testing.T) {
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := newClient(t, prefix, "m")
	l, err := c.Mutex("jobs").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	other := newClient(t, prefix, "w")
	lockInBackground(t, func(ctx context.Context) (*dlock.Lease, error) { return other.Mutex("jobs").Lock(ctx) })
	waitWaiters(t, c, dlock.KindMutex, "jobs", 1)
	s, err := c.Semaphore("pool", 3).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(ctx)
	held := time.Now()
	time.Sleep(300 * time.Millisecond) // the hold's age: what is measured

	srv, _ := serve(t, c, Options{Refresh: 100 * time.Millisecond, MetricNames: []string{"jobs", "nowhere"}})
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	fams := parseMetrics(t, get(t, srv, "/metrics", 200))
	for _, want := range []struct {
		name   string
		labels []string
		v      float64
	}{
		{"dlock_locks_held", []string{"kind", "mutex"}, 1},
		{"dlock_holders", []string{"kind", "mutex"}, 1},
		{"dlock_waiters", []string{"kind", "mutex"}, 1},
		{"dlock_locks_held", []string{"kind", "semaphore"}, 1},
		{"dlock_holders", []string{"kind", "semaphore"}, 1},
		{"dlock_waiters", []string{"kind", "semaphore"}, 0},
		{"dlock_locks_held", []string{"kind", "rwmutex"}, 0},
		{"dlock_lock_held", []string{"kind", "mutex", "name", "jobs"}, 1},
		{"dlock_lock_holders", []string{"kind", "mutex", "name", "jobs"}, 1},
		{"dlock_lock_waiters", []string{"kind", "mutex", "name", "jobs"}, 1},
		{"dlock_deadlocks", nil, 0},
		{"dlock_snapshot_errors_total", nil, 0},
	} {
		if v, ok := value(fams, want.name, want.labels...); !ok || v != want.v {
			t.Errorf("%s%v = %v (present %v), want %v", want.name, want.labels, v, ok, want.v)
		}
	}
	age, ok := value(fams, "dlock_oldest_hold_age_seconds", "kind", "mutex")
	if upper := time.Since(held).Seconds() + 1; !ok || age < 0.2 || age > upper {
		t.Errorf("oldest mutex hold %vs, want between 0.2 and %v", age, upper)
	}
	if _, ok := value(fams, "dlock_lock_held", "kind", "semaphore", "name", "pool"); ok {
		t.Error("a series for pool, which is not listed")
	}
	if n, ok := value(fams, "dlock_snapshots_total"); !ok || n < 1 {
		t.Errorf("dlock_snapshots_total %v", n)
	}
	for name, f := range fams {
		if f.GetHelp() == "" || f.Type == nil {
			t.Errorf("%s: no HELP or TYPE", name)
		}
	}
}

// TestMetricsEscapeNames: names with quotes, backslashes, new lines and
// bytes that are not UTF-8 come out as label values the parser reads
// back (a name that is not UTF-8, Go-quoted); a deadlock and a broken one are counted.
func TestMetricsEscapeNames(t *testing.T) {
	at := time.Now()
	s := threeCycle(at)
	odd := "a \"quoted\" \\ name\nwith a line and \xff"
	s.Locks = append(s.Locks, &dlock.LockInfo{Kind: dlock.KindLatch, Name: odd, Held: true, Count: 2})
	st := &state{snap: s, at: at, refreshes: 3, errors: 1}
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	writeMetrics(w, st, []string{odd, "accounts"}, at)
	w.Flush()
	fams := parseMetrics(t, b.String())
	if v, ok := value(fams, "dlock_lock_held", "kind", "latch", "name", strconv.Quote(odd)); !ok || v != 1 {
		t.Errorf("the odd name's series: %v %v\n%s", v, ok, b.String())
	}
	for _, want := range []struct {
		name string
		v    float64
	}{{"dlock_deadlocks", 1}, {"dlock_deadlocks_broken_last_hour", 1}, {"dlock_snapshot_errors_total", 1},
		{"dlock_snapshots_total", 3}, {"dlock_snapshot_keys_scanned", 42}} {
		if v, _ := value(fams, want.name); v != want.v {
			t.Errorf("%s = %v, want %v", want.name, v, want.v)
		}
	}
	if v, _ := value(fams, "dlock_lock_waiters", "kind", "mutex", "name", "accounts"); v != 1 {
		t.Errorf("accounts' waiters %v, want 1", v)
	}
	// no snapshot yet (the first refresh failed): still well formed
	b.Reset()
	writeMetrics(w, &state{errors: 1, refreshes: 1}, nil, at)
	w.Flush()
	fams = parseMetrics(t, b.String())
	if v, _ := value(fams, "dlock_snapshot_errors_total"); v != 1 {
		t.Errorf("errors %v after a failed first refresh", v)
	}
}
