package telemetry

import (
	"context"
	"testing"
	"time"
)

// BenchmarkTelemetryPerLock is what telemetry adds to one Lock + Unlock
// with no OpenTelemetry SDK installed (the global no-op providers) and no
// logger: the calls the acquire path, the hold and Unlock make, without
// Redis. Compare its ns/op with an uncontended Lock + Unlock (bench/,
// BenchmarkUncontended): that is the overhead.
func BenchmarkTelemetryPerLock(b *testing.B) {
	tel := New(Config{})
	acquired := time.Now()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		actx, span := tel.AcquireStarted(ctx, "Mutex", "x", true)
		tel.AcquireEnded(actx, span, "Mutex", "x", start, nil)
		tel.HoldStarted("Mutex", "x")
		_, uspan := tel.tracer.Start(ctx, "dlock.Unlock", tel.SpanAttrs("Mutex", "x"))
		uspan.End()
		tel.HoldEnded("Mutex", "x", acquired, "", "")
	}
}
