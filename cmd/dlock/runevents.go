package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// What "dlock run" tells on stderr: a line of text per note or error, or
// with --json one JSON object a line per event, for scripts. The events
// and their fields are documented in docs/cli.md ("run --json"); fields
// may be added, never renamed, removed or given another meaning.
//
//	{"event":"waiting","at":"…","name":"job","wait_ms":10000}
//	{"event":"acquired","at":"…","name":"job","fence":42,"ttl_ms":30000}
//	{"event":"started","at":"…","name":"job","command":["./report.sh"]}
//	{"event":"renewed","at":"…","name":"job","fence":42,"ttl_ms":29998}
//	{"event":"exit","at":"…","name":"job","status":0}
//	{"event":"released","at":"…","name":"job","fence":42}

// Event names of run --json.
const (
	eventWaiting  = "waiting"  // the lock is busy; run waits (wait_ms: --wait, null: no bound)
	eventConflict = "conflict" // the lock stayed busy (-n, --wait): status is run's exit status
	eventAcquired = "acquired" // run holds the lock: fence, ttl_ms (--ttl)
	eventStarted  = "started"  // CMD runs: command
	eventRenewed  = "renewed"  // the watchdog renewed the lease: fence, ttl_ms left by the server's count
	eventLost     = "lost"     // the lease was lost: error
	eventMaxHold  = "max_hold" // --max-hold ran out: max_hold_ms
	eventSignal   = "signal"   // run got a stopping signal: signal (SIGINT...)
	eventExit     = "exit"     // CMD exited: status (shell style: 128+n for signal n)
	eventReleased = "released" // run gave the lock back: fence
	eventError    = "error"    // something failed: error
)

// reporter writes run's notes, errors and events to stderr, as text or
// (--json) as JSON lines; --quiet leaves out the notes of text mode, never
// an event. It is safe for concurrent use: the renewal
// reporter writes beside the loop that supervises CMD.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	json  bool
	quiet bool // the text of quietable events is left out (never JSON)
	name  string
}

// fail tells an error: with --json, an error event.
func (r *reporter) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if r.json {
		r.event(eventError, "error", msg)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	complain(r.w, "%s", msg)
}

// tell reports the event ev with its fields (key, value pairs): with
// --json as a JSON line, else as the text (which --quiet leaves out when
// quietable), or nothing when text is "".
func (r *reporter) tell(quietable bool, text string, ev string, kv ...any) {
	if r.json {
		r.event(ev, kv...)
		return
	}
	if text == "" || quietable && r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	complain(r.w, "%s", text)
}

// event writes one JSON line: event, at, name, then kv in order.
func (r *reporter) event(ev string, kv ...any) {
	var b bytes.Buffer
	field := func(k string, v any) {
		if b.Len() > 0 {
			b.WriteByte(',')
		} else {
			b.WriteByte('{')
		}
		kj, _ := json.Marshal(k)
		vj, err := json.Marshal(v)
		if err != nil {
			vj, _ = json.Marshal(fmt.Sprint(v))
		}
		b.Write(kj)
		b.WriteByte(':')
		b.Write(vj)
	}
	field("event", ev)
	field("at", time.Now().UTC().Format(jsonTime))
	field("name", r.name)
	for i := 0; i+1 < len(kv); i += 2 {
		field(fmt.Sprint(kv[i]), kv[i+1])
	}
	b.WriteString("}\n")
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(b.Bytes())
}

// renewalsMetric is the library's counter of the renewals its watchdog
// sent (docs/operating.md): run --json listens to it for its renewed
// events.
const renewalsMetric = "dlock.renewals"

// renewalMeter is a MeterProvider whose only live instrument is the
// renewals counter: each Add pings the channel (without blocking: one
// ping waiting is enough). Everything else is a no-op.
type renewalMeter struct {
	noop.MeterProvider
	ping chan<- struct{}
}

// Meter returns the meter of the renewals counter.
func (p renewalMeter) Meter(string, ...metric.MeterOption) metric.Meter {
	return renewalMeterM{ping: p.ping}
}

type renewalMeterM struct {
	noop.Meter
	ping chan<- struct{}
}

// Int64Counter returns the pinging counter for the renewals, a no-op one
// for the others.
func (m renewalMeterM) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name == renewalsMetric {
		return renewalCounter{ping: m.ping}, nil
	}
	return m.Meter.Int64Counter(name, opts...)
}

type renewalCounter struct {
	noop.Int64Counter
	ping chan<- struct{}
}

// Add pings: the watchdog has sent renewals.
func (c renewalCounter) Add(context.Context, int64, ...metric.AddOption) {
	select {
	case c.ping <- struct{}{}:
	default:
	}
}

// reportRenewals writes a renewed event after each ping, once a read of
// the server shows that h is still held (its TTL left); a ping whose read
// fails says nothing (a lost lease has its own event). It returns when
// ctx ends.
func reportRenewals(ctx context.Context, h holding, pings <-chan struct{}, r *reporter) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-pings:
		}
		rctx, cancel := context.WithTimeout(ctx, unlockTimeout)
		ttl, err := h.TTL(rctx)
		cancel()
		if err == nil && h.Err() == nil {
			r.event(eventRenewed, "fence", h.Fence(), "ttl_ms", msJSON(ttl))
		}
	}
}
