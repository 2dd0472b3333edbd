package transport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"
)

// recorded is a Reports that keeps what it is told.
type recorded struct {
	mu        sync.Mutex
	published []string // the errors of refused publishes
	commands  []string // each command's first word and its error ("" for none)
}

func (r *recorded) PublishRefused(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, err.Error())
}

func (r *recorded) CommandRefused(cmd driver.Command, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := ""
	if err != nil {
		e = err.Error()
	}
	r.commands = append(r.commands, fmt.Sprint(cmd.Args[0], ": ", e))
}

// take returns what r was told since the last take.
func (r *recorded) take() (published, commands []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	published, commands = r.published, r.commands
	r.published, r.commands = nil, nil
	return
}

// refusedScript is a script that replies as one whose publish was
// refused does (publish in scripts/lib.lua), with reply after the error
// when it is not "".
func refusedScript(reply string) driver.Command {
	src := fmt.Sprintf("return {%q, 'NOPERM no channel'%s}", protocol.RefusedMark, reply)
	return protocol.Cmd("EVAL", src, 0)
}

// The stack gives a script whose publish was refused the reply it meant,
// tells Reports of the refusal, and tells it of every command's reply —
// on single calls, pipelines and dedicated connections alike.
func TestStackReportsRefusals(t *testing.T) {
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	rep := &recorded{}
	st := Stack(goredis.New(rdb), rep)
	ctx := context.Background()
	check := func(what string, got driver.Reply, want any, published, commands []string) {
		t.Helper()
		if fmt.Sprint(got.Val) != fmt.Sprint(want) || got.Err != nil {
			t.Errorf("%s: %v, %v; want %v", what, got.Val, got.Err, want)
		}
		p, c := rep.take()
		if !slices.Equal(p, published) || !slices.Equal(c, commands) {
			t.Errorf("%s: told of refused publishes %q and of commands %q; want %q and %q", what, p, c, published, commands)
		}
	}

	check("a refused publish with a reply", st.Do(ctx, refusedScript(", 7")), int64(7),
		[]string{"NOPERM no channel"}, []string{"EVAL: "})
	check("a refused publish without a reply", st.Do(ctx, refusedScript("")), nil,
		[]string{"NOPERM no channel"}, []string{"EVAL: "})
	check("a plain reply", st.Do(ctx, protocol.Cmd("EVAL", "return {'a', 'b', 3}", 0)), []any{"a", "b", int64(3)}, nil, []string{"EVAL: "})

	r := st.Do(ctx, protocol.Cmd("NOSUCHCOMMAND"))
	_, c := rep.take()
	if r.Err == nil || len(c) != 1 || c[0] != "NOSUCHCOMMAND: "+r.Err.Error() {
		t.Errorf("an error reply: %v; told %q; want the error told", r.Err, c)
	}

	cmds := []driver.Command{refusedScript(", 'x'"), protocol.Cmd("PING")}
	rs := st.Pipeline(ctx, cmds)
	check("a pipeline's refused publish", rs[0], "x", []string{"NOPERM no channel"}, []string{"EVAL: ", "PING: "})
	check("a pipeline's other reply", rs[1], "PONG", nil, nil)

	err := st.Dedicated(ctx, "k", func(conn driver.Conn) error {
		rs = conn.Pipeline(ctx, cmds)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check("a dedicated pipeline's refused publish", rs[0], "x", []string{"NOPERM no channel"}, []string{"EVAL: ", "PING: "})
	check("a dedicated pipeline's other reply", rs[1], "PONG", nil, nil)
}
