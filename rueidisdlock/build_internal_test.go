package rueidisdlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

// build allocates nothing of its own: a command's words go in an array on
// its stack, which rueidis's builder copies into a command of its own
// (the []string made per call was 2 of the 25 allocations of an
// uncontended Lock+Unlock). Counted against rueidis's builder making the
// same command from words it is given.
func TestBuildAllocatesOnlyRueidisCommand(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := driver.Command{Args: []any{"EVALSHA", "0123456789abcdef", "1", "lock", "token", "30000"}, FirstKey: 3, Keys: 1}
	words := []string{"EVALSHA", "0123456789abcdef", "1", "lock", "token", "30000"}
	theirsOnce := func() { _ = client.B().Arbitrary(words[:3]...).Keys(words[3]).Args(words[4:]...).Build() }
	oursOnce := func() {
		if _, err := build(client.B(), c, true, "", false); err != nil {
			t.Fatal(err)
		}
	}
	// rueidis's pool of commands, which earlier traffic may have left
	// filled, drained first: none of these is given back, so both are
	// then counted with every command made anew (an attack found the
	// baseline one lower when measured on a filled pool)
	for range 10_000 {
		theirsOnce()
	}
	theirs := testing.AllocsPerRun(100, theirsOnce)
	ours := testing.AllocsPerRun(100, oursOnce)
	if ours > theirs {
		t.Errorf("build made %.0f allocations, rueidis's builder alone %.0f", ours, theirs)
	}
}

// handed keeps what queued returns on the heap, as a call does.
var handed context.Context

// queued drops ctx's deadline and keeps its end and values; a ctx that
// cannot end is passed as it is, without an allocation.
func TestQueued(t *testing.T) {
	type key struct{}
	bg := context.WithValue(context.Background(), key{}, "v")
	if n := testing.AllocsPerRun(100, func() { handed = queued(bg) }); n != 0 {
		t.Errorf("queued of a ctx that cannot end made %.0f allocations", n)
	}
	ctx, cancel := context.WithTimeout(bg, time.Hour)
	q := queued(ctx)
	if _, ok := q.Deadline(); ok {
		t.Error("queued(ctx) has a deadline")
	}
	if q.Value(key{}) != "v" || queued(bg).Value(key{}) != "v" {
		t.Error("queued lost ctx's values")
	}
	cancel()
	select {
	case <-q.Done():
	default:
		t.Error("queued(ctx) did not end with ctx")
	}
	if !errors.Is(q.Err(), context.Canceled) {
		t.Errorf("queued(ctx).Err() = %v", q.Err())
	}
}
