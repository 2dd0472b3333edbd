// Package telemetry is dlock's instruments: logs through log/slog, metrics
// and spans through the OpenTelemetry API. The application brings the SDK
// (or none: then every instrument is a no-op and costs next to nothing).
// It is a leaf: it imports nothing of dlock, and takes plain data (the
// primitive and the lock's name as strings, times, counts, errors).
//
// Metrics (instrumentation scope "github.com/dlock-go/dlock"):
//
//	dlock.acquire.duration        histogram, s   a Lock/TryLock, call to return; by primitive and outcome
//	dlock.hold.duration           histogram, s   a hold, acquired to ended; by primitive
//	dlock.leases.held             up-down counter  holds held now; by primitive
//	dlock.waiters                 up-down counter  Locks waiting now; by primitive
//	dlock.leases.lost             counter        holds lost; by primitive and reason
//	dlock.deadlocks               counter        acquires given up to break a deadlock (ErrDeadlock)
//	dlock.renewals                counter        renewals sent by the watchdog
//	dlock.renewal.failures        counter        renewals whose outcome is unknown (Redis errors)
//	dlock.renewal.batch.size      histogram      renewals per watchdog batch
//	dlock.renewal.batch.duration  histogram, s   a batch's round trip
//
// Attributes: dlock.primitive (Mutex, FairMutex, RWMutex, Semaphore,
// LockAll), dlock.outcome (acquired, busy, canceled, closed, invalid,
// error), dlock.reason (deadline: no renewal confirmed in time; ended: a
// fixed lease ran out; gone: Redis no longer had it). The lock's name is
// left out unless Config.Names is set (dlock.WithNameAttribute): names are
// unbounded.
//
// Spans: "dlock.Lock", "dlock.TryLock" and "dlock.Unlock", with the same
// attributes.
package telemetry

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

// scope names dlock's meter and tracer.
const scope = "github.com/dlock-go/dlock"

// Attribute keys.
const (
	attrPrimitive = attribute.Key("dlock.primitive")
	attrOutcome   = attribute.Key("dlock.outcome")
	attrReason    = attribute.Key("dlock.reason")
	attrName      = attribute.Key("dlock.lock.name")
)

// Loss reasons (dlock.reason): the reason a lost hold's error carries.
const (
	ReasonDeadline = "deadline" // no renewal confirmed before the local deadline
	ReasonEnded    = "ended"    // a fixed lease ran out
	ReasonGone     = "gone"     // Redis no longer had the hold
)

// Config is what a Client's options say of its telemetry, and the errors
// an acquire's outcome (dlock.outcome) is told by.
type Config struct {
	Logger  *slog.Logger         // nil: no logging
	Meters  metric.MeterProvider // nil: the global provider
	Tracers trace.TracerProvider // nil: the global provider
	Names   bool                 // add the lock's name (dlock.lock.name)

	// Closed, Invalid and Busy are the errors of an acquire whose outcome
	// is "closed", "invalid" and "busy" (matched with errors.Is): dlock's
	// ErrClosed, ErrInvalidArgument and ErrNotObtained. One left nil
	// matches no error.
	Closed, Invalid, Busy error
}

// Telemetry is a Client's instruments. It is safe for concurrent use.
type Telemetry struct {
	// Log is the Client's logger (one that discards when none was given).
	Log *slog.Logger

	names  bool
	tracer trace.Tracer
	// closed, invalid and busy: see Config.
	closed, invalid, busy error
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
	deadlocks  metric.Int64Counter
	renewals   metric.Int64Counter
	renewFails metric.Int64Counter
	batchSize  metric.Int64Histogram
	batchDur   metric.Float64Histogram

	// sets are the attribute sets without a name, made once (read-only
	// after New: no lock on the hot path).
	sets map[[3]string]metric.MeasurementOption
	// spans are the span start options without a name, made once.
	spans map[string]trace.SpanStartOption
}

// The values the attribute sets take.
var (
	primitives = []string{"Mutex", "FairMutex", "RWMutex", "Semaphore", "Election", "Latch"}
	outcomes   = []string{"acquired", "busy", "canceled", "closed", "invalid", "error"}
	reasons    = []string{ReasonDeadline, ReasonEnded, ReasonGone}
)

// New makes a Client's instruments from cfg. An instrument that cannot be
// made is a no-op one: telemetry never stops a lock.
func New(cfg Config) *Telemetry {
	t := &Telemetry{Log: cfg.Logger, names: cfg.Names, sets: map[[3]string]metric.MeasurementOption{},
		closed: cfg.Closed, invalid: cfg.Invalid, busy: cfg.Busy}
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
	if t.Log == nil {
		t.Log = slog.New(slog.DiscardHandler)
	}
	mp, tp := cfg.Meters, cfg.Tracers
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
	t.deadlocks, _ = m.Int64Counter("dlock.deadlocks", metric.WithUnit("{acquire}"),
		metric.WithDescription("Acquires given up to break a deadlock"))
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
func (t *Telemetry) attrs(what, name string, k2 attribute.Key, v2 string) metric.MeasurementOption {
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

// SpanAttrs are the attributes of a span of the primitive what on the lock
// called name.
func (t *Telemetry) SpanAttrs(what, name string) trace.SpanStartOption {
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
func (t *Telemetry) tracing() bool {
	return t.globalTP == nil || otel.GetTracerProvider() != t.globalTP
}

// measuring reports whether a measurement may be kept (see globalMP).
func (t *Telemetry) measuring() bool {
	return t.globalMP == nil || otel.GetMeterProvider() != t.globalMP
}

// Start starts the span op, or does nothing (a no-op span) when it could
// not record.
func (t *Telemetry) Start(ctx context.Context, op string, opt trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.tracing() {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, op, opt)
}

// AcquireStarted starts an acquire's span: "dlock.Lock" if it waits,
// "dlock.TryLock" if not.
func (t *Telemetry) AcquireStarted(ctx context.Context, what, name string, wait bool) (context.Context, trace.Span) {
	op := "dlock.TryLock"
	if wait {
		op = "dlock.Lock"
	}
	return t.SpanOn(ctx, op, what, name)
}

// SpanOn starts the span op of the primitive what on the lock name, as
// Start with SpanAttrs, but makes its attributes only when it records:
// with no tracer provider set they would be made for nothing, at every
// call whose lock's name the spans carry (WithTelemetryNames).
func (t *Telemetry) SpanOn(ctx context.Context, op, what, name string) (context.Context, trace.Span) {
	if !t.tracing() {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, op, t.SpanAttrs(what, name))
}

// AcquireEnded records an acquire's duration since start and its outcome,
// told by its error err (nil: acquired), and ends its span.
func (t *Telemetry) AcquireEnded(ctx context.Context, span trace.Span, what, name string, start time.Time, err error) {
	o := t.outcomeOf(err)
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
func (t *Telemetry) outcomeOf(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, t.closed):
		return "closed"
	case errors.Is(err, t.invalid):
		return "invalid"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, t.busy):
		return "busy"
	}
	return "error"
}

// HoldStarted counts a new hold of the primitive what on the lock called
// name.
func (t *Telemetry) HoldStarted(what, name string) {
	if !t.measuring() {
		return
	}
	t.held.Add(context.Background(), 1, t.attrs(what, name, "", ""))
}

// HoldEnded counts the end of a hold acquired at acquired, and its loss if
// it was lost: reason (a Reason constant) and why are then the loss's, and
// the loss is logged (Warn); reason is "" for a hold that was not lost.
func (t *Telemetry) HoldEnded(what, name string, acquired time.Time, reason, why string) {
	ctx := context.Background()
	if t.measuring() {
		t.held.Add(ctx, -1, t.attrs(what, name, "", ""))
		t.hold.Record(ctx, time.Since(acquired).Seconds(), t.attrs(what, name, "", ""))
	}
	if reason != "" {
		t.lost.Add(ctx, 1, t.attrs(what, name, attrReason, reason))
		t.Log.Warn("dlock: lease lost", "lock", name, "primitive", what, "reason", reason, "why", why)
	}
}

// Waiting counts a Lock that waits (n = 1) or stops waiting (n = -1).
func (t *Telemetry) Waiting(what, name string, n int64) {
	t.waiters.Add(context.Background(), n, t.attrs(what, name, "", ""))
}

// Deadlock counts an acquire of lock name given up to break a deadlock.
func (t *Telemetry) Deadlock(what, name string) {
	t.deadlocks.Add(context.Background(), 1, t.attrs(what, name, "", ""))
}

// Renewed records a watchdog batch of size renewals and its round trip
// took; failed of them failed (first is the first one's error), which is
// counted and logged (Warn).
func (t *Telemetry) Renewed(size, failed int, first error, took time.Duration) {
	ctx := context.Background()
	t.renewals.Add(ctx, int64(size))
	t.batchSize.Record(ctx, int64(size))
	t.batchDur.Record(ctx, took.Seconds())
	if failed > 0 {
		t.renewFails.Add(ctx, int64(failed))
		t.Log.Warn("dlock: renewals failed; retrying", "failed", failed, "batch", size, "err", first)
	}
}
