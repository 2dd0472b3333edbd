package rueidisdlock

import (
	"context"
	"testing"

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
		if _, err := build(client.B(), c, "", false); err != nil {
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

// detached keeps what detach returns on the heap, as a call does.
var detached context.Context

// detach keeps ctx's values and drops its end; a ctx that cannot end is
// passed as it is, without an allocation.
func TestDetach(t *testing.T) {
	type key struct{}
	bg := context.WithValue(context.Background(), key{}, "v")
	if n := testing.AllocsPerRun(100, func() { detached = detach(bg) }); n != 0 {
		t.Errorf("detach of a ctx that cannot end made %.0f allocations", n)
	}
	ctx, cancel := context.WithCancel(bg)
	d := detach(ctx)
	cancel()
	if d.Err() != nil || d.Done() != nil {
		t.Errorf("detach(ctx) ended with ctx: %v", d.Err())
	}
	if d.Value(key{}) != "v" || detach(bg).Value(key{}) != "v" {
		t.Error("detach lost ctx's values")
	}
}
