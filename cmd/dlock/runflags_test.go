package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseRun checks run's command line: what it accepts, what it
// refuses, and where the URL comes from. Nothing is contacted.
func TestParseRun(t *testing.T) {
	env := func(url string) func(string) string {
		return func(k string) string {
			if k == redisURLEnv {
				return url
			}
			return ""
		}
	}
	good := []struct {
		args  []string
		env   string
		check func(c runConfig) bool
	}{
		{[]string{"job", "--", "echo", "--ttl"}, "", func(c runConfig) bool {
			return c.name == "job" && slices.Equal(c.argv, []string{"echo", "--ttl"}) && !c.noWait && !c.wait.set &&
				c.conflictCode == exitBusy && c.target.server.Addr == "127.0.0.1:6379"
		}},
		{[]string{"-n", "job", "--", "x"}, "", func(c runConfig) bool { return c.noWait }},
		{[]string{"--no-wait", "job", "--", "x"}, "", func(c runConfig) bool { return c.noWait }},
		{[]string{"--wait", "0", "job", "--", "x"}, "", func(c runConfig) bool { return c.noWait }},
		{[]string{"--wait", "1m30s", "--conflict-exit-code", "0", "job", "--", "x"}, "", func(c runConfig) bool {
			return !c.noWait && c.wait.set && c.wait.d == 90*time.Second && c.conflictCode == 0
		}},
		{[]string{"job", "--", "x"}, "redis://10.1.2.3:7000/3", func(c runConfig) bool { return c.target.server.Addr == "10.1.2.3:7000" && c.target.server.DB == 3 }},
		{[]string{"--redis", "redis://10.9.9.9:1", "job", "--", "x"}, "redis://10.1.2.3:7000", func(c runConfig) bool { return c.target.server.Addr == "10.9.9.9:1" }},
		{[]string{"--", "-job", "--", "x"}, "", func(c runConfig) bool { return c.name == "-job" }},
		// flags after NAME, as after a command's other arguments
		{[]string{"job", "--ttl", "5s", "-n", "--", "x", "--ttl", "1s"}, "", func(c runConfig) bool {
			return c.name == "job" && c.ttl == 5*time.Second && c.noWait && slices.Equal(c.argv, []string{"x", "--ttl", "1s"})
		}},
		// flock's spellings: -w takes plain seconds (a unit still works)
		{[]string{"-w", "10", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.set && c.wait.d == 10*time.Second }},
		{[]string{"-w", "1.5", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 1500*time.Millisecond }},
		{[]string{"-w", "10s", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 10*time.Second }},
		{[]string{"-w10", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 10*time.Second }},
		{[]string{"--wait", "10", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 10*time.Second }},
		{[]string{"--wait=10m", "job", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 10*time.Minute }},
		{[]string{"job", "--wait", "10m", "--", "x"}, "", func(c runConfig) bool { return c.wait.d == 10*time.Minute }},
		{[]string{"-w", "0", "job", "--", "x"}, "", func(c runConfig) bool { return c.noWait }},
		{[]string{"-E", "3", "job", "--", "x"}, "", func(c runConfig) bool { return c.conflictCode == 3 }},
		{[]string{"job", "-E3", "-n", "--", "x"}, "", func(c runConfig) bool { return c.conflictCode == 3 && c.noWait }},
		{[]string{"--conflict-exit-code", "3", "job", "--", "x"}, "", func(c runConfig) bool { return c.conflictCode == 3 }},
		{[]string{"-s", "job", "--", "x"}, "", func(c runConfig) bool { return c.shared && !c.exclusive }},
		{[]string{"job", "--shared", "--", "x"}, "", func(c runConfig) bool { return c.shared }},
		{[]string{"job", "-x", "--", "x"}, "", func(c runConfig) bool { return c.exclusive && !c.shared }},
		{[]string{"--exclusive", "job", "--", "x"}, "", func(c runConfig) bool { return c.exclusive }},
		{[]string{"-nx", "job", "--", "x"}, "", func(c runConfig) bool { return c.exclusive && c.noWait }},
		// -c: through the shell, NAME before or after it
		{[]string{"-c", "echo $X", "job"}, "", func(c runConfig) bool {
			return c.name == "job" && slices.Equal(c.argv, []string{"/bin/sh", "-c", "echo $X"})
		}},
		{[]string{"job", "-w", "10", "-c", "echo $X"}, "", func(c runConfig) bool {
			return c.name == "job" && c.wait.d == 10*time.Second && slices.Equal(c.argv, []string{"/bin/sh", "-c", "echo $X"})
		}},
		{[]string{"job", "--command=echo $X"}, "", func(c runConfig) bool { return slices.Equal(c.argv, []string{"/bin/sh", "-c", "echo $X"}) }},
		// no command: hold the lock until a signal
		{[]string{"job"}, "", func(c runConfig) bool { return c.name == "job" && len(c.argv) == 0 }},
		{[]string{"--json", "-w", "5", "job"}, "", func(c runConfig) bool { return c.json && len(c.argv) == 0 && c.wait.d == 5*time.Second }},
	}
	for _, tc := range good {
		c, code, ok := parseRun(tc.args, env(tc.env), io.Discard, io.Discard)
		if !ok || !tc.check(c) {
			t.Errorf("%q (env %q): ok %v, code %d, config %+v", tc.args, tc.env, ok, code, c)
		}
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--", "true"}, `missing the lock NAME before "--"`},
		{[]string{"--ttl", "5", "job", "--", "x"}, "--ttl 5: not a duration (give a unit"},
		{[]string{"job", "--bogus", "--", "x"}, "unknown flag --bogus"},
		{[]string{"job", "x"}, `want "--"`},
		{[]string{"job", "--"}, "missing the command"},
		{[]string{"-c", "echo hi", "job", "--", "echo", "ho"}, `-c CMD and "-- CMD": give one of them`},
		{[]string{"job", "-c", "x", "--", "y"}, `-c CMD and "-- CMD": give one of them`},
		{[]string{"-c", " ", "job"}, "-c: empty command"},
		{[]string{"job", "-c"}, "-c (--command) needs a value"},
		{[]string{"-w", "ten", "job", "--", "x"}, "--wait ten: not a time to wait: give seconds (10, 1.5)"},
		{[]string{"-w", "1e3", "job", "--", "x"}, "--wait 1e3: not a time to wait"},
		{[]string{"-w", "-1", "job", "--", "x"}, "--wait -1: not a time to wait"},
		{[]string{"-E", "x", "job", "--", "x"}, "--conflict-exit-code x: must be an integer"},
		{[]string{"-E", "300", "job", "--", "x"}, "--conflict-exit-code 300: want 0 to 255"},
		{[]string{"-s", "-x", "job", "--", "x"}, "--shared, --exclusive"},
		{[]string{"-q", "job", "--", "x"}, "unknown flag -q"},
		{[]string{"-ttl", "5s", "job", "--", "x"}, "unknown flag -ttl: a long flag takes two dashes, --ttl"},
		{[]string{"---ttl", "5s", "job", "--", "x"}, "---ttl: not a flag"},
		{[]string{}, "missing the lock NAME"},
		{[]string{"-n", "--wait", "1s", "job", "--", "x"}, "-n and --wait"},
		{[]string{"--wait", "-1s", "job", "--", "x"}, "must not be negative"},
		{[]string{"--conflict-exit-code", "256", "job", "--", "x"}, "want 0 to 255"},
		{[]string{"--grace", "-1s", "job", "--", "x"}, "must not be negative"},
		{[]string{"--redis", "http://x", "job", "--", "x"}, `--redis "http://x"`},
	}
	for _, tc := range bad {
		var stderr strings.Builder
		if _, code, ok := parseRun(tc.args, env(""), io.Discard, &stderr); ok || code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: ok %v, code %d, stderr %q; want %d and %q", tc.args, ok, code, stderr.String(), exitUsage, tc.want)
		}
		// one line saying what, the synopsis, where the flags are listed
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) > 3 || !strings.HasPrefix(lines[0], "dlock: ") {
			t.Errorf("%q: stderr is not one line of error and the synopsis:\n%s", tc.args, stderr.String())
		}
	}
	var stdout strings.Builder
	if _, code, ok := parseRun([]string{"-h"}, env(""), &stdout, io.Discard); ok || code != exitOK {
		t.Errorf("-h: ok %v, code %d", ok, code)
	}
	for _, want := range []string{"-- CMD", "-w, --wait SECONDS", "-n, --no-wait", "-E, --conflict-exit-code status", "-s, --shared",
		"-x, --exclusive", "-c, --command CMD", "--json", "--tls-ca FILE", "DLOCK_REDIS_URL"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("run -h lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "--n ") {
		t.Errorf("run -h shows the alias -n as a flag of its own:\n%s", stdout.String())
	}
}
