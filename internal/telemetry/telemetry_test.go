package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Stand-ins for dlock's sentinel errors.
var (
	errClosed  = errors.New("closed")
	errInvalid = errors.New("invalid")
	errBusy    = errors.New("busy")
)

// scene is a Telemetry reporting to an in-memory SDK and log.
type scene struct {
	tel    *Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	logs   *bytes.Buffer
}

func newScene(t *testing.T, names bool) *scene {
	t.Helper()
	ctx := context.Background()
	s := &scene{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter(), logs: &bytes.Buffer{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.spans))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	logger := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.tel = New(Config{Logger: logger, Meters: mp, Tracers: tp, Names: names,
		Closed: errClosed, Invalid: errInvalid, Busy: errBusy})
	return s
}

// point is one data point of a metric: its attributes and its count (a
// histogram) or value (a sum).
type point struct {
	attrs string
	n     int64
}

// collect reads every metric of dlock's scope: name -> unit and points.
func (s *scene) collect(t *testing.T) (units map[string]string, points map[string][]point) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	units, points = map[string]string{}, map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/dlock-go/dlock" {
			t.Errorf("scope %q; want github.com/dlock-go/dlock", sm.Scope.Name)
			continue
		}
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					points[m.Name] = append(points[m.Name], point{encode(p.Attributes), int64(p.Count)})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					points[m.Name] = append(points[m.Name], point{encode(p.Attributes), int64(p.Count)})
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[m.Name] = append(points[m.Name], point{encode(p.Attributes), p.Value})
				}
			default:
				t.Errorf("metric %s: unexpected %T", m.Name, d)
			}
		}
	}
	return units, points
}

// encode writes a set as k=v,k=v (sorted by key).
func encode(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
	}
	return strings.Join(kv, ",")
}

// Every instrument keeps the name, unit and attributes dashboards are
// built on, and the logs their messages.
func TestTelemetryNamesUnitsAndAttributes(t *testing.T) {
	s := newScene(t, false)
	tel, ctx := s.tel, context.Background()

	for _, c := range []struct {
		what string
		wait bool
		err  error
	}{
		{"Mutex", true, nil},
		{"Mutex", false, fmt.Errorf("x: %w", errBusy)},
		{"RWMutex", true, context.Canceled},
		{"Semaphore", true, errClosed},
		{"FairMutex", false, errInvalid},
		{"LockAll", true, errors.New("redis down")},
	} {
		actx, span := tel.AcquireStarted(ctx, c.what, "lock-a", c.wait)
		tel.AcquireEnded(actx, span, c.what, "lock-a", time.Now(), c.err)
	}
	tel.Waiting("Mutex", "lock-a", 1)
	tel.Waiting("Mutex", "lock-a", 1)
	tel.Waiting("Mutex", "lock-a", -1)
	tel.HoldStarted("Mutex", "lock-a")
	tel.HoldStarted("Mutex", "lock-b")
	tel.HoldStarted("Semaphore", "lock-c")
	tel.HoldEnded("Mutex", "lock-a", time.Now(), "", "")
	tel.HoldEnded("Mutex", "lock-b", time.Now(), ReasonGone, "the lock was no longer held")
	tel.HoldEnded("Semaphore", "lock-c", time.Now(), ReasonDeadline, "no renewal confirmed before its deadline")
	tel.Renewed(3, 0, nil, time.Millisecond)
	tel.Renewed(2, 1, errors.New("i/o timeout"), time.Millisecond)
	_, span := tel.Start(ctx, "dlock.Unlock", tel.SpanAttrs("Mutex", "lock-a"))
	span.End()

	units, points := s.collect(t)
	wantUnits := map[string]string{
		"dlock.acquire.duration":       "s",
		"dlock.hold.duration":          "s",
		"dlock.leases.held":            "{hold}",
		"dlock.waiters":                "{waiter}",
		"dlock.leases.lost":            "{hold}",
		"dlock.renewals":               "{renewal}",
		"dlock.renewal.failures":       "{renewal}",
		"dlock.renewal.batch.size":     "{renewal}",
		"dlock.renewal.batch.duration": "s",
	}
	for name, unit := range wantUnits {
		if got, ok := units[name]; !ok || got != unit {
			t.Errorf("metric %s: unit %q (recorded %v); want %q", name, got, ok, unit)
		}
	}
	for name := range units {
		if _, ok := wantUnits[name]; !ok {
			t.Errorf("unexpected metric %s", name)
		}
	}
	want := map[string]map[string]int64{
		"dlock.acquire.duration": {
			"dlock.outcome=acquired,dlock.primitive=Mutex":    1,
			"dlock.outcome=busy,dlock.primitive=Mutex":        1,
			"dlock.outcome=canceled,dlock.primitive=RWMutex":  1,
			"dlock.outcome=closed,dlock.primitive=Semaphore":  1,
			"dlock.outcome=invalid,dlock.primitive=FairMutex": 1,
			"dlock.outcome=error,dlock.primitive=LockAll":     1,
		},
		"dlock.waiters":       {"dlock.primitive=Mutex": 1},
		"dlock.leases.held":   {"dlock.primitive=Mutex": 0, "dlock.primitive=Semaphore": 0},
		"dlock.hold.duration": {"dlock.primitive=Mutex": 2, "dlock.primitive=Semaphore": 1},
		"dlock.leases.lost": {
			"dlock.primitive=Mutex,dlock.reason=gone":         1,
			"dlock.primitive=Semaphore,dlock.reason=deadline": 1,
		},
		"dlock.renewals":               {"": 5},
		"dlock.renewal.failures":       {"": 1},
		"dlock.renewal.batch.size":     {"": 2},
		"dlock.renewal.batch.duration": {"": 2},
	}
	for name, w := range want {
		got := map[string]int64{}
		for _, p := range points[name] {
			got[p.attrs] += p.n
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %v; want %v", name, got, w)
		}
	}

	type spanWant struct {
		name, attrs string
		failed      bool
	}
	var gotSpans []spanWant
	for _, sp := range s.spans.GetSpans() {
		gotSpans = append(gotSpans, spanWant{sp.Name, encode(attribute.NewSet(sp.Attributes...)), sp.Status.Code == codes.Error})
	}
	wantSpans := []spanWant{
		{"dlock.Lock", "dlock.outcome=acquired,dlock.primitive=Mutex", false},
		{"dlock.TryLock", "dlock.outcome=busy,dlock.primitive=Mutex", false},
		{"dlock.Lock", "dlock.outcome=canceled,dlock.primitive=RWMutex", false},
		{"dlock.Lock", "dlock.outcome=closed,dlock.primitive=Semaphore", false},
		{"dlock.TryLock", "dlock.outcome=invalid,dlock.primitive=FairMutex", false},
		{"dlock.Lock", "dlock.outcome=error,dlock.primitive=LockAll", true},
		{"dlock.Unlock", "dlock.primitive=Mutex", false},
	}
	if fmt.Sprint(gotSpans) != fmt.Sprint(wantSpans) {
		t.Errorf("spans\n%v\nwant\n%v", gotSpans, wantSpans)
	}

	logs := strings.Split(strings.TrimSpace(s.logs.String()), "\n")
	wantLogs := []string{
		`level=WARN msg="dlock: lease lost" lock=lock-b primitive=Mutex reason=gone why="the lock was no longer held"`,
		`level=WARN msg="dlock: lease lost" lock=lock-c primitive=Semaphore reason=deadline why="no renewal confirmed before its deadline"`,
		`level=WARN msg="dlock: renewals failed; retrying" failed=1 batch=2 err="i/o timeout"`,
	}
	if len(logs) != len(wantLogs) {
		t.Fatalf("logs:\n%s\nwant %d lines", s.logs, len(wantLogs))
	}
	for i, l := range logs {
		// drop the time= field
		if _, rest, ok := strings.Cut(l, " "); !ok || rest != wantLogs[i] {
			t.Errorf("log line %d: %s\nwant (after time=): %s", i, l, wantLogs[i])
		}
	}
}

// The lock's name is on metrics and spans only when asked for (names are
// unbounded: each is a new time series).
func TestTelemetryNameAttributeOnlyWhenAsked(t *testing.T) {
	for _, names := range []bool{false, true} {
		s := newScene(t, names)
		ctx := context.Background()
		actx, span := s.tel.AcquireStarted(ctx, "Mutex", "orders", true)
		s.tel.AcquireEnded(actx, span, "Mutex", "orders", time.Now(), nil)
		s.tel.HoldStarted("Mutex", "orders")
		s.tel.HoldEnded("Mutex", "orders", time.Now(), ReasonEnded, "its fixed lease ran out")
		s.tel.Waiting("Mutex", "orders", 1)

		_, points := s.collect(t)
		for name, ps := range points {
			for _, p := range ps {
				if strings.HasPrefix(name, "dlock.renewal") {
					continue
				}
				if has := strings.Contains(p.attrs, "dlock.lock.name=orders"); has != names {
					t.Errorf("names %v: %s {%s}: name attribute %v", names, name, p.attrs, has)
				}
			}
		}
		for _, sp := range s.spans.GetSpans() {
			if has := strings.Contains(encode(attribute.NewSet(sp.Attributes...)), "dlock.lock.name=orders"); has != names {
				t.Errorf("names %v: span %s: name attribute %v", names, sp.Name, has)
			}
		}
	}
}

// An acquire's outcome is told by its error, wrapped or not; an error
// matching none of dlock's is "error".
func TestTelemetryOutcomeOf(t *testing.T) {
	tel := New(Config{Closed: errClosed, Invalid: errInvalid, Busy: errBusy})
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "acquired"},
		{errBusy, "busy"},
		{errors.Join(errBusy, context.DeadlineExceeded), "canceled"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("dlock: %w", errClosed), "closed"},
		{errors.Join(errClosed, context.Canceled), "closed"},
		{fmt.Errorf("dlock: %w: nil context", errInvalid), "invalid"},
		{errors.New("READONLY"), "error"},
	} {
		if got := tel.outcomeOf(c.err); got != c.want {
			t.Errorf("outcomeOf(%v) = %q; want %q", c.err, got, c.want)
		}
	}
	// Sentinels left out match nothing.
	if got := New(Config{}).outcomeOf(errBusy); got != "error" {
		t.Errorf("outcomeOf with no sentinels = %q; want error", got)
	}
}

// With no SDK installed and no provider given, the instruments are
// OpenTelemetry's global ones, and spans and measurements are skipped
// (they would be dropped). The test leaves the global providers alone: a
// test binary cannot put them back.
func TestTelemetryWithoutSDKSkips(t *testing.T) {
	if !unset(otel.GetTracerProvider()) || !unset(otel.GetMeterProvider()) {
		t.Skip("a global provider is installed")
	}
	tel := New(Config{})
	if tel.tracing() || tel.measuring() {
		t.Fatalf("tracing %v, measuring %v with no SDK; want neither", tel.tracing(), tel.measuring())
	}
	if _, span := tel.AcquireStarted(context.Background(), "Mutex", "x", true); span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("span %v recording with no SDK", span)
	}
	// Providers given are used, whatever the global ones.
	given := newScene(t, false).tel
	if !given.tracing() || !given.measuring() {
		t.Errorf("tracing %v, measuring %v with providers given; want both", given.tracing(), given.measuring())
	}
	// An SDK's providers are not the unset global ones.
	if unset(sdktrace.NewTracerProvider()) || unset(sdkmetric.NewMeterProvider()) {
		t.Errorf("an SDK provider taken for the unset global one")
	}
}
