package doclint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The README's quick start is a whole program, examples/quickstart, which
// go vet compiles: the README shows that file, byte for byte.
func TestReadmeQuickStartIsTheProgram(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start"`)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if block, _, ok = strings.Cut(block, "```\n"); !ok {
		t.Fatal("the quick start has no Go block")
	}
	if block != string(prog) {
		t.Errorf("README.md's quick start is not examples/quickstart/main.go; copy the file into the README")
	}
}
