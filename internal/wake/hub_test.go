package wake

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

var errClosed = errors.New("closed")

// Confirmations cannot be counted against SUBSCRIBEs: two sent on a
// connection that dies are answered by go-redis's one resubscription.
// Whatever confirmation comes, a channel's waiters then check the lock,
// or a release published before the subscription took effect is lost for
// the holder's whole lease.
func TestEveryConfirmationMakesWaitersCheck(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	h := New(goredis.New(rdb), Config{ID: "id", Closed: errClosed})
	defer h.Close()
	// The pub/sub connection is up (a first channel is confirmed) before
	// the server is paused, so that SUBSCRIBEs are written to it.
	w0, err := h.Join("other", "z", make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Leave(w0)
	<-w0.Ready
	if err := s.Pause(); err != nil { // no confirmation comes back by itself
		t.Fatal(err)
	}
	defer func() { _ = s.Resume() }()
	const name = "dlock:{x}:ch"
	// A waiter comes and goes, then another comes: two SUBSCRIBEs sent.
	w1, err := h.Join(name, "a", make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	h.Leave(w1)
	w2, err := h.Join(name, "b", make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Leave(w2)
	// One confirmation comes: a resubscription after a reconnect answers
	// both.
	h.confirmed(h.shared, name)
	select {
	case <-w2.Ready:
	default:
		t.Fatal("after a confirmation of its channel the waiter was not told to check the lock")
	}
}

// A SUBSCRIBE that meets a connection killed a moment before is sent
// again: go-redis's reconnect, made inside that failed call, subscribes the
// new connection only to the channels it had before.
func TestSubscribeOnAKilledConnectionIsSentAgain(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb, admin := s.Client(), s.Client()
	defer rdb.Close()
	defer admin.Close()
	h := New(goredis.New(rdb), Config{ID: "id", Closed: errClosed})
	defer h.Close()
	ctx := context.Background()
	w0, err := h.Join("other", "z", make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Leave(w0)
	<-w0.Ready
	missing := 0
	for i := range 40 {
		if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		name := "ch-" + strconv.Itoa(i)
		w, err := h.Join(name, "a", make(chan struct{}, 1))
		if err != nil {
			t.Fatal(err)
		}
		// Polls the server's state: with the bug no signal ever comes.
		subscribed := false
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			n, err := admin.PubSubNumSub(ctx, name).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n[name] > 0 {
				subscribed = true
				break
			}
		}
		if !subscribed {
			missing++
		}
		h.Leave(w)
	}
	if missing > 0 {
		t.Fatalf("%d of 40 channels never subscribed after a connection kill", missing)
	}
}
