package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion checks "dlock --version" and "dlock version", and the
// version string for the builds there are.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		r := runCLI(args...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "dlock ") || !strings.HasSuffix(r.stdout, " "+runtime.Version()+"\n") {
			t.Errorf("%q: code %d, stdout %q", args, r.code, r.stdout)
		}
	}
	if r := runCLI("version", "extra"); r.code != exitUsage {
		t.Errorf("version extra: code %d, want %d", r.code, exitUsage)
	}
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: rev}, true, "v1.4.0"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, true, "(devel, 0123456789ab, modified)"},
		{&debug.BuildInfo{Settings: rev[:1]}, true, "(devel, 0123456789ab)"},
	} {
		if got := dlockVersion(tc.bi, tc.ok); got != tc.want {
			t.Errorf("dlockVersion(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}
