package drivertest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// recorder records a pub/sub connection's events and what the driver
// must not do: hand over two at once, or any after Close returned.
type recorder struct {
	mu     sync.Mutex
	events []driver.Event

	inside     atomic.Int32
	concurrent atomic.Bool // two events were handed over at once
	closed     atomic.Bool // Close returned
	late       atomic.Bool // an event came after that
}

func (r *recorder) event(e driver.Event) {
	if r.inside.Add(1) != 1 {
		r.concurrent.Store(true)
	}
	defer r.inside.Add(-1)
	if r.closed.Load() {
		r.late.Store(true)
	}
	time.Sleep(time.Millisecond) // widen the window for overlapping calls
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// mark returns how many events have come so far.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// since returns the events after mark.
func (r *recorder) since(mark int) []driver.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[mark:])
}

// await waits until every event of want has come after mark.
func (r *recorder) await(t *testing.T, mark int, want ...driver.Event) {
	t.Helper()
	eventually(t, fmt.Sprintf("events %+v", want), func() bool {
		got := r.since(mark)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	})
}

// check fails t if the driver broke its promises about events.
func (r *recorder) check(t *testing.T) {
	t.Helper()
	if r.concurrent.Load() {
		t.Error("two events were handed over at once")
	}
	if r.late.Load() {
		t.Error("an event was handed over after Close returned")
	}
}

func subscribed(ch string) driver.Event       { return driver.Event{Channel: ch, Subscribed: true} }
func message(ch, payload string) driver.Event { return driver.Event{Channel: ch, Payload: payload} }

// publish publishes on ch (SPUBLISH when sharded) through d and returns
// how many subscribers received it.
func publish(t *testing.T, d driver.Driver, sharded bool, ch, msg string) int64 {
	t.Helper()
	word := "PUBLISH"
	if sharded {
		word = "SPUBLISH"
	}
	n, err := d.Do(context.Background(), cmd(word, ch, msg)).Int64()
	if err != nil {
		t.Fatalf("%s %s: %v", word, ch, err)
	}
	return n
}

// testPubSub: a subscription is confirmed by an event, a message comes as
// one; when the connection is killed, the driver reconnects and confirms
// every channel again (and messages flow again); Unsubscribe stops a
// channel's messages; nothing comes after Close. servers are the nodes on
// which to kill pub/sub connections.
func testPubSub(t *testing.T, d driver.Driver, sharded bool, node string, servers []*redistest.Server, ch1 string) {
	ctx := context.Background()
	ch2 := ch1 + ":{" + ch1 + "}:two" // the same slot as ch1 on a cluster
	// PUBLISH on a cluster counts the subscribers of the node it ran on.
	counts := sharded || !d.Info().Cluster
	rec := &recorder{}
	ps := d.PubSub(node, sharded, rec.event)
	closed := false
	defer func() {
		if !closed {
			_ = ps.Close()
		}
	}()
	// deliver publishes until the message comes (a subscription may be
	// confirmed to the driver before the server of the publish knows it).
	deliver := func(ch, payload string) {
		t.Helper()
		mark := rec.mark()
		eventually(t, "message "+payload+" on "+ch, func() bool {
			publish(t, d, sharded, ch, payload)
			return slices.Contains(rec.since(mark), message(ch, payload))
		})
	}

	if err := ps.Subscribe(ctx, ch1, ch2); err != nil {
		t.Fatal(err)
	}
	rec.await(t, 0, subscribed(ch1), subscribed(ch2))
	if counts {
		if n := publish(t, d, sharded, ch1, "hello"); n != 1 {
			t.Errorf("publish to a subscribed channel reached %d subscribers, want 1", n)
		}
		rec.await(t, 0, message(ch1, "hello"))
	}
	deliver(ch1, "hello again")

	// A broken connection: reconnected, every channel confirmed again.
	for round := range 2 {
		mark := rec.mark()
		killPubSub(t, servers)
		rec.await(t, mark, subscribed(ch1), subscribed(ch2))
		deliver(ch2, "again-"+strconv.Itoa(round))
	}

	// Unsubscribe: ch1's messages stop, ch2's do not.
	if err := ps.Unsubscribe(ctx, ch1); err != nil {
		t.Fatal(err)
	}
	// (Unsubscribe need not wait for the server: probe until it took
	// effect, then publish what must not come.)
	if counts {
		probes := 0
		eventually(t, "the unsubscription", func() bool {
			probes++
			return publish(t, d, sharded, ch1, "probe-"+strconv.Itoa(probes)) == 0
		})
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	publish(t, d, sharded, ch1, "gone")
	deliver(ch2, "still")
	time.Sleep(50 * time.Millisecond)
	for _, e := range rec.since(0) {
		if e.Channel == ch1 && e.Payload == "gone" {
			t.Errorf("a message on an unsubscribed channel came: %+v", e)
		}
	}

	// Close: nothing comes after it returns.
	if err := ps.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	rec.closed.Store(true)
	if counts {
		eventually(t, "the connection to close", func() bool { return publish(t, d, sharded, ch2, "after") == 0 })
	} else {
		publish(t, d, sharded, ch2, "after")
		time.Sleep(100 * time.Millisecond)
	}
	rec.check(t)
}

// testPubSubClose: Close returns, and ends the events, whatever state the
// connection is in: just made, subscribing, receiving.
func testPubSubClose(t *testing.T, d driver.Driver) {
	ctx := context.Background()
	for i := range 20 {
		rec := &recorder{}
		ps := d.PubSub("", false, rec.event)
		ch := channel(t)
		if i%2 == 1 {
			_ = ps.Subscribe(ctx, ch)
		}
		if i%4 == 3 {
			rec.await(t, 0, subscribed(ch))
			publish(t, d, false, ch, "x")
		}
		if err := ps.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		rec.closed.Store(true)
		time.Sleep(5 * time.Millisecond)
		rec.check(t)
	}
	// A closed connection refuses, or ignores, a subscription, and hands
	// over nothing.
	rec := &recorder{}
	ps := d.PubSub("", false, rec.event)
	_ = ps.Close()
	rec.closed.Store(true)
	ch := channel(t)
	_ = ps.Subscribe(ctx, ch)
	time.Sleep(50 * time.Millisecond)
	if n := publish(t, d, false, ch, "x"); n != 0 {
		t.Errorf("a closed connection's subscription received a message (%d receivers)", n)
	}
	rec.check(t)
}

// killPubSub kills the pub/sub connections on every running server:
// CLIENT KILL TYPE pubsub, and by id every connection that CLIENT LIST
// still shows subscribed (servers that count a RESP3 subscriber as a
// normal client do not kill it by type).
func killPubSub(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	ctx := context.Background()
	killed := 0
	for _, s := range servers {
		admin := s.Client()
		n, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int()
		if err != nil {
			admin.Close()
			continue // not running
		}
		killed += n
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			admin.Close()
			t.Fatal(err)
		}
		for _, id := range subscribers(list) {
			if admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err() == nil {
				killed++
			}
		}
		admin.Close()
	}
	if killed == 0 {
		t.Fatal("no pub/sub connection to kill")
	}
}

var subField = regexp.MustCompile(`\b(sub|psub|ssub)=(\d+)`)

// subscribers returns the ids of the clients of a CLIENT LIST that have
// subscriptions.
func subscribers(list string) []string {
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var id string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
		}
		for _, m := range subField.FindAllStringSubmatch(line, -1) {
			if m[2] != "0" && id != "" {
				ids = append(ids, id)
				break
			}
		}
	}
	return ids
}
