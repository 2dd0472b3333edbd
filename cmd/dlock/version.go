package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// versionCmd is "dlock version" (also "dlock --version"): it prints the
// module version dlock was built from, "(devel)" for a build from a
// checkout (with the commit when the build recorded it), and the Go
// version.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		return usageError(stderr, "dlock version", "version takes no arguments, got %q", args)
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprintf(stdout, "dlock %s %s\n", dlockVersion(bi, ok), runtime.Version())
	return exitOK
}

// dlockVersion is the main module's version from the build info, or
// "(devel)" when there is none, with the VCS revision if recorded.
func dlockVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(devel)"
	}
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "(devel)"
	}
	return fmt.Sprintf("(devel, %s%s)", rev, dirty)
}
