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
		{[]string{"job"}, `missing "-- CMD"`},
		{[]string{"job", "--"}, "missing the command"},
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
	}
	var stdout strings.Builder
	if _, code, ok := parseRun([]string{"-h"}, env(""), &stdout, io.Discard); ok || code != exitOK {
		t.Errorf("-h: ok %v, code %d", ok, code)
	}
	for _, want := range []string{"-- CMD", "--wait DURATION", "--no-wait", "--conflict-exit-code status", "--tls-ca FILE", "DLOCK_REDIS_URL"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("run -h lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "--n ") {
		t.Errorf("run -h shows the alias -n as a flag of its own:\n%s", stdout.String())
	}
}
