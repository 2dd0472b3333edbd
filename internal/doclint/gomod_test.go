package doclint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// allowed is every module the library's go.mod may name, with why. A
// service that imports github.com/dlock-go/dlock gets these in its go.sum
// (the .mod files) and compiles only those its imports reach. What only the
// CLI, the demo or PostgreSQL fencing needs lives in its own module
// (cmd/dlock, fence/pgfence), and the benchmarks' anchors in bench/.
var allowed = map[string]string{
	"github.com/redis/go-redis/v9":        "the default client",
	"github.com/redis/rueidis":            "rueidisdlock (compiled only when imported; the suite runs on it)",
	"github.com/valkey-io/valkey-go":      "valkeydlock (likewise)",
	"go.opentelemetry.io/otel":            "metrics and traces, the API",
	"go.opentelemetry.io/otel/metric":     "the metrics API",
	"go.opentelemetry.io/otel/trace":      "the traces API",
	"go.opentelemetry.io/otel/sdk":        "tests only: they read what was recorded",
	"go.opentelemetry.io/otel/sdk/metric": "tests only",
	"go.uber.org/goleak":                  "tests only: no goroutine outlives a test",
	"pgregory.net/rapid":                  "tests only: property tests of the deadlock rule (internal/deadlock)",
	// what those require
	"github.com/cespare/xxhash/v2": "go-redis",
	"go.uber.org/atomic":           "go-redis's pool",
	"github.com/go-logr/logr":      "otel",
	"github.com/go-logr/stdr":      "otel",
	"go.opentelemetry.io/auto/sdk": "otel",
	"go.opentelemetry.io/otel/log": "otel",
	"github.com/google/uuid":       "otel's SDK (tests only)",
}

// TestLibraryRequiresOnlyTheAllowed holds the library's go.mod to the list
// above (and golang.org/x/): a requirement outside it fails here, so a
// dependency of the CLI, the demo or a fence's database cannot slip into
// every service that locks.
func TestLibraryRequiresOnlyTheAllowed(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := requirements(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("go.mod names no requirement: the parser missed them")
	}
	for _, m := range mods {
		if strings.HasPrefix(m, "golang.org/x/") {
			continue
		}
		if _, ok := allowed[m]; !ok {
			t.Errorf("the library's go.mod requires %s, which is not on the allowed list (internal/doclint/gomod_test.go): a CLI, demo or database dependency belongs in its own module (cmd/dlock, fence/pgfence); a new one the library needs goes on the list, with why", m)
		}
	}
}

// TestRequirementsParsed checks the parser on both forms go.mod uses, so
// the test above cannot pass by reading nothing.
func TestRequirementsParsed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "go.mod")
	const mod = "module m\n\ngo 1.26.0\n\nrequire a.example/one v1.0.0\n\nrequire (\n\tb.example/two v0.1.0 // indirect\n\n\tc.example/three v2.0.0\n)\n"
	if err := os.WriteFile(p, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := requirements(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.example/one", "b.example/two", "c.example/three"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("requirements = %q, want %q", got, want)
	}
}

// requirements lists the module paths a go.mod's require directives name.
func requirements(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var mods []string
	block := false
	for line := range strings.Lines(string(b)) {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case block && f[0] == ")":
			block = false
		case block:
			mods = append(mods, f[0])
		case f[0] == "require" && len(f) >= 2 && f[1] == "(":
			block = true
		case f[0] == "require" && len(f) >= 3:
			mods = append(mods, f[1])
		}
	}
	return mods, nil
}
