// Command dlock is the command-line face of the dlock library.
//
//	dlock demo                          see the lock at work (no setup needed)
//	dlock run NAME -- CMD [ARGS...]     run a command while holding a lock (-c 'CMD': through /bin/sh)
//	dlock run NAME                      hold a lock until SIGINT or SIGTERM
//	dlock run --value V NAME -- CMD     run a command while leading an election
//	dlock inspect NAME                  show who holds a lock, who waits, and its state
//	dlock ls [PATTERN]                  list the locks, of every kind
//	dlock top [PATTERN]                 watch the locks live, busiest first
//	dlock web [--listen ADDR]           serve a live page of the locks, and their metrics
//	dlock deadlocks [--json]            show the deadlocks now, and those broken lately
//	dlock unlock --force NAME           free a lock whoever holds it (admin)
//	dlock leader [--watch] NAME         show (or follow) who leads an election
//	dlock check                         check a server against what dlock needs
//	dlock version                       print dlock's version
//
// "go run ./cmd/dlock demo" starts its own throwaway redis-server (or, when
// none is installed, an embedded one), lets several processes contend for
// one lock, and checks the recorded history for overlapping critical
// sections, fencing-token order and lost updates.
//
// The commands are implemented by run, which takes its arguments and
// output streams as parameters and returns the exit status, so that the
// tests drive the CLI in-process.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

// main runs the command line and exits with its status.
func main() {
	// go-redis logs its dial retries; dlock reports the error itself.
	redis.SetLogger(quietLogger{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// quietLogger discards go-redis's internal log lines.
type quietLogger struct{}

// Printf discards its arguments.
func (quietLogger) Printf(context.Context, string, ...any) {}

// Exit statuses shared by the commands (run also passes its child's on).
const (
	exitOK          = 0
	exitFail        = 1   // the command ran and failed, or the demo's check failed
	exitUsage       = 2   // bad command line
	exitInterrupted = 130 // SIGINT or SIGTERM ended the command (128 + SIGINT)
)

// defaultRedisURL is where run, inspect, ls, top, unlock, leader and check look without
// --redis.
const defaultRedisURL = "redis://127.0.0.1:6379"

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string
	fn      func(args []string, stdout, stderr io.Writer) int
	hidden  bool // internal: not listed in the usage
}

// commands lists the subcommands in the order the usage shows them.
var commands = []command{
	{name: "demo", summary: "show the lock at work: processes contend for one lock, then the history is checked", fn: demoCmd},
	{name: "run", summary: "run a command while holding a lock (--value: leading an election); stop it if that is lost", fn: runCmd},
	{name: "inspect", summary: "show a lock's holders and their owners, its waiters in order, TTL, fence and state", fn: inspectCmd},
	{name: "ls", summary: "list the locks under the prefix, of every kind, with holders, waiters and TTL", fn: lsCmd},
	{name: "top", summary: "a live view of the locks, busiest first: holders, hold times, waiters, acquisitions/s", fn: topCmd},
	{name: "web", summary: "serve a live page of the locks (holders, waiters, the wait-for graph, deadlocks), /metrics and /api/snapshot", fn: webCmd},
	{name: "deadlocks", summary: "show the deadlocks now (each cycle: who holds what, waits for what, its victim) and those broken in the last hour", fn: deadlocksCmd},
	{name: "unlock", summary: "free a lock whoever holds it (--force; admin); its holders find out at their next renewal", fn: unlockCmd},
	{name: "leader", summary: "show who leads an election: value, term, since, TTL, owner; --watch follows every change", fn: leaderCmd},
	{name: "check", summary: "check a server against what dlock needs: its version (supported or not), scripts, commands, keys and channels under the prefix, noeviction, persistence", fn: checkCmd},
	{name: "version", summary: "print dlock's version (also --version)", fn: versionCmd},
	{name: workerCommand, fn: demoWorkerCmd, hidden: true},
	{name: guardCommand, fn: guardCmd, hidden: true},
}

// run executes the command line args (without the program name), writing
// to stdout and stderr, and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.fn(args[1:], stdout, stderr)
		}
	}
	complain(stderr, "unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

// synopses are the one-line forms of the public commands, for the usage:
// each command's own, so that the overview lists every flag it does.
var synopses = []string{demoSynopsis, runSynopsis, inspectSynopsis, lsSynopsis, topSynopsis, webSynopsis, deadlocksSynopsis, unlockSynopsis,
	leaderSynopsis, checkSynopsis, "dlock version"}

// usage writes the overview of all public commands to w.
func usage(w io.Writer) {
	fmt.Fprintln(w, "dlock: distributed locks on Redis, with fencing tokens and lease-loss signals")
	fmt.Fprintln(w, "\nusage:")
	for _, s := range synopses {
		fmt.Fprintln(w, "  "+s)
	}
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\n--redis URL: where the locks are; $%s, else %s, when not given\n", redisURLEnv, defaultRedisURL)
	fmt.Fprintln(w, "(demo: a server of its own). URL is one of")
	fmt.Fprint(w, urlForms)
	fmt.Fprintln(w, "--tls-ca, --tls-cert, --tls-key, --tls-insecure adjust TLS (every command but demo).")
	fmt.Fprintln(w, "--kind: mutex (FairMutex too), rwmutex, semaphore, latch or election; PATTERN: path.Match syntax on names.")
	fmt.Fprintln(w, "run --value V leads the election NAME with value V (what leader shows) instead of locking NAME.")
	fmt.Fprintln(w, "leader exits 0 when someone leads, 3 when nobody does; --watch until SIGINT or SIGTERM, then 0.")
	fmt.Fprintln(w, `Run "dlock COMMAND -h" for a command's flags.`)
}

// newFlags returns an empty flag set for the named command. Its flags
// are GNU style (spf13/pflag): "--name value" or "--name=value", short
// forms "-x" that may be grouped ("-nx") and take their value attached or
// apart ("-w10", "-w 10"), and flags before or after the positional
// arguments, up to a "--".
func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("dlock "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseFlags prints what is needed, where
	fs.Usage = func() {}
	fs.SortFlags = false // -h lists them in the order they were defined
	return fs
}

// parseFlags parses args into fs. It returns ok when the command should
// go on; otherwise code is the exit status: 0 after -h or --help (the
// command's usage went to stdout), 2 after a bad flag (one line saying
// what, and the synopsis, to stderr). fs.Args() is then the positional
// arguments, and fs.ArgsLenAtDash() says how many came before a "--".
func parseFlags(fs *pflag.FlagSet, synopsis string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, pflag.ErrHelp):
		printFlags(fs, synopsis, stdout)
		return exitOK, false
	default:
		complain(stderr, "%s\nusage: %s\n(%s -h lists the flags)", flagError(fs, err), synopsis, fs.Name())
		return exitUsage, false
	}
}

// flagError says what is wrong with a flag in dlock's words, from
// pflag's typed errors: the flag as the user typed it, and for a value
// what a good one looks like (a duration's unit: durationValue, waitFlag).
func flagError(fs *pflag.FlagSet, err error) string {
	var (
		unknown *pflag.NotExistError
		noValue *pflag.ValueRequiredError
		bad     *pflag.InvalidValueError
		syntax  *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &unknown):
		group := unknown.GetSpecifiedShortnames()
		switch long, _, _ := strings.Cut(group, "="); {
		case group == "":
			return fmt.Sprintf("unknown flag --%s", unknown.GetSpecifiedName())
		case len(long) > 1 && fs.Lookup(long) != nil:
			// the standard library's single-dash long form, "-ttl 5s"
			return fmt.Sprintf("unknown flag -%s: a long flag takes two dashes, --%s", long, long)
		case len(group) > 1:
			return fmt.Sprintf("unknown flag -%s (in -%s)", unknown.GetSpecifiedName(), group)
		}
		return fmt.Sprintf("unknown flag -%s", unknown.GetSpecifiedName())
	case errors.As(err, &noValue):
		if noValue.GetSpecifiedShortnames() != "" {
			return fmt.Sprintf("-%s (--%s) needs a value", noValue.GetSpecifiedName(), noValue.GetFlag().Name)
		}
		return fmt.Sprintf("--%s needs a value", noValue.GetFlag().Name)
	case errors.As(err, &bad):
		return fmt.Sprintf("--%s %s: %v", bad.GetFlag().Name, bad.GetValue(), errors.Unwrap(bad))
	case errors.As(err, &syntax):
		return fmt.Sprintf("%s: not a flag (flags are -x or --name)", syntax.GetSpecifiedFlag())
	}
	return err.Error()
}

// printFlags writes a command's synopsis and flags to w. Hidden flags,
// and flags without a usage text, are internal and not shown.
func printFlags(fs *pflag.FlagSet, synopsis string, w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\nflags:\n", synopsis)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Usage == "" || f.Hidden {
			return
		}
		kind, text := pflag.UnquoteUsage(f)
		if kind != "" {
			kind = " " + kind
		}
		short := "    "
		if f.Shorthand != "" {
			short = "-" + f.Shorthand + ", "
		}
		fmt.Fprintf(w, "  %s--%s%s\n    \t%s", short, f.Name, kind, text)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// errNotDuration is the complaint about a duration without a unit.
var errNotDuration = errors.New("not a duration (give a unit: 5s, 300ms, 1m)")

// durationValue is a duration flag whose bad values are told what a
// duration looks like.
type durationValue time.Duration

// durationVar defines a duration flag --name (and -short, unless "").
func durationVar(fs *pflag.FlagSet, p *time.Duration, name, short string, value time.Duration, usage string) {
	*p = value
	fs.VarP((*durationValue)(p), name, short, usage)
}

// Set parses a Go duration: 300ms, 5s, 1m30s.
func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errNotDuration
	}
	*d = durationValue(v)
	return nil
}

// String returns the duration as Go writes it.
func (d *durationValue) String() string { return time.Duration(*d).String() }

// Type names the kind of value for -h.
func (d *durationValue) Type() string { return "duration" }

// usageError reports a bad command line and returns the usage exit status.
func usageError(stderr io.Writer, synopsis, format string, a ...any) int {
	complain(stderr, "%s\nusage: %s", fmt.Sprintf(format, a...), synopsis)
	return exitUsage
}

// complain writes one error line to w. It starts with "dlock: ", once:
// the library's errors already do.
func complain(w io.Writer, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !strings.HasPrefix(msg, "dlock: ") {
		msg = "dlock: " + msg
	}
	fmt.Fprintln(w, msg)
}

// keysFor returns the keys of the lock called name under prefix, as the
// library names them. The caller has checked the prefix and the name.
func keysFor(prefix, name string) dlock.Keys {
	k, _ := dlock.KeysOf(prefix, name)
	return k
}

// checkPrefix rejects a prefix the library would refuse.
func checkPrefix(p string) error {
	if _, err := dlock.KeysOf(p, "-"); err != nil {
		return fmt.Errorf("--prefix %q: %w", p, err)
	}
	return nil
}
