package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry: logs through log/slog, metrics and spans through the
// OpenTelemetry API. The application brings the SDK (or none: then every
// instrument is a no-op and costs next to nothing).
//
// Metrics (instrumentation scope "github.com/dlock-go/dlock"):
//
//	dlock.acquire.duration        histogram, s   a Lock/TryLock, call to return; by primitive and outcome
//	dlock.hold.duration           histogram, s   a hold, acquired to ended; by primitive
//	dlock.leases.held             up-down counter  holds held now; by primitive
//	dlock.waiters                 up-down counter  Locks waiting now; by primitive
//	dlock.leases.lost             counter        holds lost; by primitive and reason
//	dlock.renewals                counter        renewals sent by the watchdog
//	dlock.renewal.failures        counter        renewals whose outcome is unknown (Redis errors)
//	dlock.renewal.batch.size      histogram      renewals per watchdog batch
//	dlock.renewal.batch.duration  histogram, s   a batch's round trip
//
// Attributes: dlock.primitive (Mutex, FairMutex, RWMutex, Semaphore,
// LockAll), dlock.outcome (acquired, busy, canceled, closed, invalid,
// error), dlock.reason (deadline: no renewal confirmed in time; ended: a
// fixed lease ran out; gone: Redis no longer had it). The lock's name is
// left out unless WithNameAttribute is given: names are unbounded.
//
// Spans: "dlock.Lock", "dlock.TryLock" and "dlock.Unlock", with the same
// attributes.

// scope names dlock's meter and tracer.
const scope = "github.com/dlock-go/dlock"

// Attribute keys.
const (
	attrPrimitive = attribute.Key("dlock.primitive")
	attrOutcome   = attribute.Key("dlock.outcome")
	attrReason    = attribute.Key("dlock.reason")
	attrName      = attribute.Key("dlock.lock.name")
)

// Loss reasons (dlock.reason).
const (
	reasonDeadline = "deadline" // no renewal confirmed before the local deadline
	reasonEnded    = "ended"    // a fixed lease ran out
	reasonGone     = "gone"     // Redis no longer had the hold
)

// WithLogger logs what a Client's owner should hear of: leases lost
// (Warn), renewals and background releases that failed (Warn), acquires
// whose outcome was unknown and were undone (Info), quorum nodes that
// failed (Warn). Nothing on the happy path is logged above Debug. Default:
// no logging.
func WithLogger(l *slog.Logger) Option {
	return func(c *clientConfig) { c.logger = l }
}

// WithMeterProvider records the Client's metrics (see the list in the
// package documentation of telemetry) with mp. Default: the global
// provider, otel.GetMeterProvider(), a no-op until the application sets
// one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *clientConfig) { c.meters = mp }
}

// WithTracerProvider makes the Client's spans with tp. Default: the global
// provider, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *clientConfig) { c.tracers = tp }
}

// WithNameAttribute adds the lock's name (dlock.lock.name) to metrics and
// spans. Off by default: every distinct name is a new time series.
func WithNameAttribute() Option {
	return func(c *clientConfig) { c.names = true }
}

// telemetry is a Client's instruments.
type telemetry struct {
	log    *slog.Logger
	names  bool
	tracer trace.Tracer
	// The global providers as New found them when no SDK was installed
	// (OpenTelemetry's own, which drop everything until one is): while they
	// are still the global ones, spans and measurements are skipped, as
	// they would be dropped (each costs allocations on the hot path). An
	// SDK installed later replaces them, and from then on dlock's
	// instruments, made from them, report to it.
	globalTP trace.TracerProvider
	globalMP metric.MeterProvider

	acquire    metric.Float64Histogram
	hold       metric.Float64Histogram
	held       metric.Int64UpDownCounter
	waiters    metric.Int64UpDownCounter
	lost       metric.Int64Counter
	renewals   metric.Int64Counter
	renewFails metric.Int64Counter
	batchSize  metric.Int64Histogram
	batchDur   metric.Float64Histogram

	// sets are the attribute sets without a name, made once (read-only
	// after newTelemetry: no lock on the hot path).
	sets map[[3]string]metric.MeasurementOption
	// spans are the span start options without a name, made once.
	spans map[string]trace.SpanStartOption
}

// The values the attribute sets take.
var (
	primitives = []string{"Mutex", "FairMutex", "RWMutex", "Semaphore"}
	outcomes   = []string{"acquired", "busy", "canceled", "closed", "invalid", "error"}
	reasons    = []string{reasonDeadline, reasonEnded, reasonGone}
)

func newTelemetry(cfg clientConfig) *telemetry {
	t := &telemetry{log: cfg.logger, names: cfg.names, sets: map[[3]string]metric.MeasurementOption{}}
	t.spans = map[string]trace.SpanStartOption{}
	for _, p := range primitives {
		t.spans[p] = trace.WithAttributes(attrPrimitive.String(p))
		t.sets[[3]string{p, "", ""}] = metric.WithAttributeSet(attribute.NewSet(attrPrimitive.String(p)))
		for _, o := range outcomes {
			t.sets[[3]string{p, string(attrOutcome), o}] = metric.WithAttributeSet(attribute.NewSet(attrPrimitive.String(p), attrOutcome.String(o)))
		}
		for _, r := range reasons {
			t.sets[[3]string{p, string(attrReason), r}] = metric.WithAttributeSet(attribute.NewSet(attrPrimitive.String(p), attrReason.String(r)))
		}
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	mp, tp := cfg.meters, cfg.tracers
	if mp == nil {
		mp = otel.GetMeterProvider()
		if unset(mp) {
			t.globalMP = mp
		}
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
		if unset(tp) {
			t.globalTP = tp
		}
	}
	t.tracer = tp.Tracer(scope)
	m := mp.Meter(scope)
	// An instrument that cannot be made is a no-op one (the API returns
	// one with the error); telemetry never stops a lock.
	t.acquire, _ = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a Lock or TryLock call to its return"))
	t.hold, _ = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a hold was held, acquired to ended"))
	t.held, _ = m.Int64UpDownCounter("dlock.leases.held", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds held now"))
	t.waiters, _ = m.Int64UpDownCounter("dlock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Locks waiting now"))
	t.lost, _ = m.Int64Counter("dlock.leases.lost", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds lost before their Unlock"))
	t.renewals, _ = m.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals sent by the watchdog"))
	t.renewFails, _ = m.Int64Counter("dlock.renewal.failures", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals whose outcome is unknown (a Redis error); retried"))
	t.batchSize, _ = m.Int64Histogram("dlock.renewal.batch.size", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals per watchdog batch"))
	t.batchDur, _ = m.Float64Histogram("dlock.renewal.batch.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of a watchdog batch"))
	return t
}

// attrs is the attribute set of a measurement: the primitive, and an
// outcome or reason (k2, v2) if given, and the name if asked for.
func (t *telemetry) attrs(what, name string, k2 attribute.Key, v2 string) metric.MeasurementOption {
	if t.names {
		kv := []attribute.KeyValue{attrPrimitive.String(what), attrName.String(name)}
		if k2 != "" {
			kv = append(kv, k2.String(v2))
		}
		return metric.WithAttributes(kv...)
	}
	if o, ok := t.sets[[3]string{what, string(k2), v2}]; ok {
		return o
	}
	kv := []attribute.KeyValue{attrPrimitive.String(what)}
	if k2 != "" {
		kv = append(kv, k2.String(v2))
	}
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// spanAttrs are a span's attributes.
func (t *telemetry) spanAttrs(what, name string) trace.SpanStartOption {
	if t.names {
		return trace.WithAttributes(attrPrimitive.String(what), attrName.String(name))
	}
	if o, ok := t.spans[what]; ok {
		return o
	}
	return trace.WithAttributes(attrPrimitive.String(what))
}

// unset reports whether p is one of OpenTelemetry's global providers
// before an SDK is installed: their type is internal to otel.
func unset(p any) bool { return strings.HasPrefix(fmt.Sprintf("%T", p), "*global.") }

// tracing reports whether a span may record (see globalTP).
func (t *telemetry) tracing() bool {
	return t.globalTP == nil || otel.GetTracerProvider() != t.globalTP
}

// measuring reports whether a measurement may be kept (see globalMP).
func (t *telemetry) measuring() bool {
	return t.globalMP == nil || otel.GetMeterProvider() != t.globalMP
}

// start starts a span, or does nothing when it could not record.
func (t *telemetry) start(ctx context.Context, op string, opt trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.tracing() {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, op, opt)
}

// acquireStarted starts an acquire's span.
func (t *telemetry) acquireStarted(ctx context.Context, what, name string, wait bool) (context.Context, trace.Span) {
	op := "dlock.TryLock"
	if wait {
		op = "dlock.Lock"
	}
	return t.start(ctx, op, t.spanAttrs(what, name))
}

// acquireEnded records an acquire's duration and outcome, and ends its
// span.
func (t *telemetry) acquireEnded(ctx context.Context, span trace.Span, what, name string, start time.Time, err error) {
	o := outcomeOf(err)
	if t.measuring() {
		t.acquire.Record(ctx, time.Since(start).Seconds(), t.attrs(what, name, attrOutcome, o))
	}
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(o))
		if o == "error" {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// outcomeOf is an acquire's dlock.outcome attribute.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrNotObtained):
		return "busy"
	}
	return "error"
}

// holdStarted counts a new hold.
func (t *telemetry) holdStarted(h *hold) {
	if !t.measuring() {
		return
	}
	t.held.Add(context.Background(), 1, t.attrs(h.what, h.k.Name, "", ""))
}

// holdEnded counts a hold's end, and its loss if it was lost.
func (t *telemetry) holdEnded(h *hold, err error) {
	ctx := context.Background()
	if t.measuring() {
		t.held.Add(ctx, -1, t.attrs(h.what, h.k.Name, "", ""))
		t.hold.Record(ctx, time.Since(h.acquired).Seconds(), t.attrs(h.what, h.k.Name, "", ""))
	}
	if le := (*lossError)(nil); errors.As(err, &le) {
		t.lost.Add(ctx, 1, t.attrs(h.what, h.k.Name, attrReason, le.reason))
		t.log.Warn("dlock: lease lost", "lock", h.k.Name, "primitive", h.what, "reason", le.reason, "why", le.why)
	}
}

// waiting counts a Lock that waits (n = 1) or stops waiting (n = -1).
func (t *telemetry) waiting(what, name string, n int64) {
	t.waiters.Add(context.Background(), n, t.attrs(what, name, "", ""))
}

// renewed records a watchdog batch: its size, round trip and failures.
func (t *telemetry) renewed(rs []renewal, took time.Duration) {
	ctx := context.Background()
	t.renewals.Add(ctx, int64(len(rs)))
	t.batchSize.Record(ctx, int64(len(rs)))
	t.batchDur.Record(ctx, took.Seconds())
	failed := 0
	var first error
	for _, r := range rs {
		if r.err != nil {
			if failed == 0 {
				first = r.err
			}
			failed++
		}
	}
	if failed > 0 {
		t.renewFails.Add(ctx, int64(failed))
		t.log.Warn("dlock: renewals failed; retrying", "failed", failed, "batch", len(rs), "err", first)
	}
}
