package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkTelemetryPerLock is what telemetry adds to one Lock + Unlock
// with no OpenTelemetry SDK installed (the global no-op providers) and no
// logger: the calls the acquire path, the hold and Unlock make, without
// Redis. Compare its ns/op with an uncontended Lock + Unlock (bench/,
// BenchmarkUncontended): that is the overhead.
func BenchmarkTelemetryPerLock(b *testing.B) {
	s := redistest.StartT(b, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	c, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	tel := c.tel
	k := c.keys(protocol.MutexKind, "x")
	h := &hold{c: c, k: k, what: "Mutex", acquired: time.Now()}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		actx, span := tel.acquireStarted(ctx, "Mutex", "x", true)
		tel.acquireEnded(actx, span, "Mutex", "x", start, nil)
		tel.holdStarted(h)
		_, uspan := tel.tracer.Start(ctx, "dlock.Unlock", tel.spanAttrs(h.what, h.k.Name))
		uspan.End()
		tel.holdEnded(h, ErrUnlocked)
	}
}
