package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// "dlock leader": who leads an election (Election.Leader), or with
// --watch every change of it (Election.Observe), as text or JSON lines.

// leaderSynopsis is leader's usage line.
const leaderSynopsis = "dlock leader [--redis URL] [--tls-*] [--prefix P] [--watch] [--json] NAME"

// exitNoLeader is leader's status when nobody leads: neither success
// (0) nor a failure to find out (1), so that a script can tell them apart.
const exitNoLeader = 3

// exitNothing is unlock --force's status when nothing under the name was
// held: nothing was freed (as a leader that is not there: 3).
const exitNothing = 3

// leaderNotes follow leader's flags in "dlock leader -h".
const leaderNotes = `
exit status:
  0   someone leads; with --watch: ended by SIGINT or SIGTERM
  1   Redis could not be read
  2   bad command line
  3   nobody leads (without --watch)
`

// leaderJSON is one state of an election, as leader --json prints it:
// one object per line. The schema is documented in docs/cli.md, stable as
// lockJSON's; every field is always present.
type leaderJSON struct {
	Name   string     `json:"name"`
	Leader bool       `json:"leader"` // somebody leads
	Value  string     `json:"value"`  // the leader's value, "" when nobody leads
	Term   int64      `json:"term"`   // the leader's term (its fence), 0 when nobody leads
	Since  *string    `json:"since"`  // when it won, by the server's clock; null when nobody leads
	TTLMs  int64      `json:"ttl_ms"` // its lease's time left when read, 0 when nobody leads
	Owner  *ownerJSON `json:"owner"`  // who the leader is, null when unknown or nobody leads
	At     string     `json:"at"`     // when this state was read, by this machine's clock
}

// leaderCmd is "dlock leader": it prints who leads the election NAME —
// its value, term, since when, its lease's time left and its owner — or
// that nobody does, and exits 0 when someone leads, exitNoLeader when
// nobody does, 1 when Redis cannot be read. With --watch it prints the
// state, then a line per change (a new leader, a new value, nobody),
// until SIGINT or SIGTERM, and exits 0. --json prints each state as a
// JSON object on a line of its own (see leaderJSON).
func leaderCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a             adminFlags
		watch, asJSON bool
	)
	fs := newFlags("leader")
	a.register(fs)
	fs.BoolVar(&watch, "watch", false, "follow the election: a line per change (new leader, new value, nobody) until SIGINT or SIGTERM")
	fs.BoolVar(&asJSON, "json", false, "print each state as a JSON object on a line of its own (the schema is in docs/cli.md)")
	if code, ok := parseFlags(fs, leaderSynopsis, args, stdout, stderr); !ok {
		if code == exitOK {
			fmt.Fprint(stdout, leaderNotes)
		}
		return code
	}
	name, err := oneName(fs)
	if err != nil {
		return usageError(stderr, leaderSynopsis, "%v", err)
	}
	opt, err := a.options()
	if err != nil {
		return usageError(stderr, leaderSynopsis, "%v", err)
	}
	emit := func(info dlock.LeaderInfo, at time.Time) error {
		if asJSON {
			return json.NewEncoder(stdout).Encode(leaderOf(name, info, at))
		}
		if watch {
			_, err := io.WriteString(stdout, leaderLine(info, at))
			return err
		}
		_, err := io.WriteString(stdout, leaderReport(name, a.prefix, info, at))
		return err
	}
	if watch {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return watchLeader(ctx, opt, a.prefix, name, emit, stderr)
	}
	return adminRun(opt, a.prefix, stderr, func(ctx context.Context, s *session) int {
		info, err := s.c.Election(name).Leader(ctx)
		if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
			complain(stderr, "leader %q: %v", name, err)
			return exitFail
		}
		if err := emit(info, time.Now()); err != nil {
			complain(stderr, "leader %q: writing: %v", name, err)
			return exitFail
		}
		if info.Term == 0 {
			return exitNoLeader
		}
		return exitOK
	})
}

// watchLeader prints the election's state and each change with emit,
// until ctx ends (SIGINT or SIGTERM: status 0). Redis errors while it
// watches are logged to stderr, and the watch goes on; it fails (status
// 1) when Redis cannot be reached at first, or the watch ends by itself.
func watchLeader(ctx context.Context, opt target, prefix, name string, emit func(dlock.LeaderInfo, time.Time) error, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := connect(ctx, opt, prefix, dlock.WithLogger(logger))
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		complain(stderr, "%v", err)
		return exitFail
	}
	defer s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := s.c.Election(name).Observe(ctx)
	for info := range states {
		if info.Err != nil {
			// blind until the next state: say so, print nothing stale
			complain(stderr, "leader %q: cannot read the election, watching on: %v", name, info.Err)
			continue
		}
		if err := emit(info, time.Now()); err != nil {
			complain(stderr, "leader %q: writing: %v", name, err)
			cancel()
			for range states { // Observe closes it once ctx has ended
			}
			return exitFail
		}
	}
	if ctx.Err() == nil {
		complain(stderr, "leader %q: the watch ended (is the Client usable on this server?)", name)
		return exitFail
	}
	return exitOK
}

// leaderOf converts a state of the election name, read at at, to JSON.
func leaderOf(name string, info dlock.LeaderInfo, at time.Time) leaderJSON {
	j := leaderJSON{Name: name, Leader: info.Term != 0, At: *timeJSON(at)}
	if j.Leader {
		j.Value, j.Term, j.Since, j.TTLMs, j.Owner = info.Value, info.Term, timeJSON(info.Since), msJSON(info.TTL), ownerOf(info.Owner)
	}
	return j
}

// leaderReport is leader's text without --watch: the leader of the
// election name and what is known of it, or that nobody leads; at is
// when it was read ("now").
func leaderReport(name, prefix string, info dlock.LeaderInfo, at time.Time) string {
	if info.Term == 0 {
		return fmt.Sprintf("no leader in election %q (prefix %q)\n", name, prefix)
	}
	since := "-"
	if !info.Since.IsZero() {
		since = fmt.Sprintf("%s (%s ago)", info.Since.UTC().Format(jsonTime), heldFor(at, info.Since))
	}
	return fmt.Sprintf("leader of election %q: %s\n  term:   %d\n  since:  %s\n  ttl:    %s\n  owner:  %s\n",
		name, strconv.Quote(info.Value), info.Term, since, left(info.TTL), ownerText(info.Owner))
}

// leaderLine is one line of leader --watch: when the state was seen (by
// this machine's clock), then the leader's value, term, owner and time
// left, or "no leader".
func leaderLine(info dlock.LeaderInfo, at time.Time) string {
	stamp := at.Format(jsonTime)
	if info.Term == 0 {
		return stamp + "  no leader\n"
	}
	owner := "owner not recorded"
	if info.Owner != nil {
		owner = who(dlock.Holder{Owner: info.Owner})
	}
	return fmt.Sprintf("%s  leader %s  term %d  %s  ttl %s\n", stamp, strconv.Quote(info.Value), info.Term, owner, left(info.TTL))
}

// ownerText describes a leader's owner in full, or says it is unknown.
func ownerText(o *dlock.Owner) string {
	if o == nil {
		return "not recorded"
	}
	c := ownerCells(o) // host, pid, program, label; "-" when unknown
	return fmt.Sprintf("host %s, pid %s, program %s, label %s (client %s)", c[0], c[1], c[2], c[3], orDash(o.Client, "-"))
}
