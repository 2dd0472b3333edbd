package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// syncBuffer is a log sink safe for the watchdog's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A scripted scenario — three acquisitions, a TryLock that finds the lock
// busy, one lease lost — gives exactly these numbers, spans and logs.
func TestTelemetryOfAScriptedScenario(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := client(t, dlock.WithMeterProvider(mp), dlock.WithTracerProvider(tp), dlock.WithLogger(logger))
	name := lockName(t)
	m := c.Mutex(name)

	for range 2 {
		unlock(t, mustLock(t, m, ctx))
	}
	l := mustLock(t, m, ctx, dlock.WithTTL(300*time.Millisecond))
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	// The lock vanishes; the next renewal finds it gone.
	newRedis(t, srv).Del(ctx, keysOf(name).Lock)
	<-l.Done()
	// The holder is told first; the loss is counted and logged just after.
	waitFor(t, "the loss logged", func() bool { return strings.Contains(logs.String(), "lease lost") })
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease: %v", err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/dlock-go/dlock" {
			continue
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	count := func(metric string, attrs ...attribute.KeyValue) int64 {
		var n int64
		switch d := got[metric].(type) {
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				if has(p.Attributes, attrs) {
					n += int64(p.Count)
				}
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				if has(p.Attributes, attrs) {
					n += int64(p.Count)
				}
			}
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if has(p.Attributes, attrs) {
					n += p.Value
				}
			}
		case nil:
			t.Errorf("no metric %s", metric)
		default:
			t.Errorf("metric %s: unexpected %T", metric, d)
		}
		return n
	}
	mutex := attribute.String("dlock.primitive", "Mutex")
	for _, c := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   int64
	}{
		{"dlock.acquire.duration", []attribute.KeyValue{mutex, attribute.String("dlock.outcome", "acquired")}, 3},
		{"dlock.acquire.duration", []attribute.KeyValue{mutex, attribute.String("dlock.outcome", "busy")}, 1},
		{"dlock.hold.duration", []attribute.KeyValue{mutex}, 3},
		{"dlock.leases.held", []attribute.KeyValue{mutex}, 0},
		{"dlock.leases.lost", []attribute.KeyValue{mutex, attribute.String("dlock.reason", "gone")}, 1},
		{"dlock.leases.lost", nil, 1},
	} {
		if n := count(c.metric, c.attrs...); n != c.want {
			t.Errorf("%s %v: %d; want %d", c.metric, c.attrs, n, c.want)
		}
	}
	if _, ok := got["dlock.renewal.failures"]; ok {
		t.Errorf("dlock.renewal.failures recorded; no renewal failed")
	}
	if n := count("dlock.renewals"); n < 1 {
		t.Errorf("dlock.renewals: %d; want at least the one that found the lock gone", n)
	}
	if n := count("dlock.renewal.batch.size"); n < 1 {
		t.Errorf("dlock.renewal.batch.size: %d batches; want at least 1", n)
	}
	// No lock name unless asked for: unbounded cardinality.
	for name, d := range got {
		if h, ok := d.(metricdata.Histogram[float64]); ok {
			for _, p := range h.DataPoints {
				if _, ok := p.Attributes.Value("dlock.lock.name"); ok {
					t.Errorf("%s carries the lock name", name)
				}
			}
		}
	}

	names := map[string]int{}
	for _, s := range spans.GetSpans() {
		names[s.Name]++
	}
	if names["dlock.Lock"] != 3 || names["dlock.TryLock"] != 1 || names["dlock.Unlock"] != 3 {
		t.Errorf("spans %v; want 3 dlock.Lock, 1 dlock.TryLock, 3 dlock.Unlock", names)
	}

	out := logs.String()
	if strings.Count(out, "lease lost") != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "reason=gone") {
		t.Errorf("logs:\n%s\nwant one WARN 'lease lost' with reason=gone", out)
	}
	if strings.Contains(out, "level=INFO") {
		t.Errorf("logs on the happy path above Debug:\n%s", out)
	}
}

// has reports whether set holds every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// A Client made before the program installs its OpenTelemetry SDK skips
// spans and measurements while nothing would keep them (they cost
// allocations on every lock), and reports to the SDK once it is there. In
// a process of its own: the global providers cannot be put back.
func TestTelemetryReachesAnSDKInstalledLater(t *testing.T) {
	h := startHelper(t, "latesdk", addrEnv+"="+srv.Addr(), nameEnv+"="+lockName(t), ttlEnv+"=10s")
	got := h.expect(t, "ok", 20*time.Second)
	if want := "ok dlock.Lock dlock.Unlock 1"; got != want {
		t.Fatalf("the SDK installed after New saw %q; want %q (the second round's spans and one acquire)", got, want)
	}
}
