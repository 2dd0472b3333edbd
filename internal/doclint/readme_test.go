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

// TestReadmeFitsTwoScreens: the README stays short (the rest of the
// documentation is in docs/, linked from it) and opens with the two
// commands CI and a new contributor run: the demo and the test script.
func TestReadmeFitsTwoScreens(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	if n := strings.Count(text, "\n"); n > 150 {
		t.Errorf("README.md has %d lines; keep it to 150 and move the rest to a page of docs/", n)
	}
	_, rest, ok := strings.Cut(text, "\n```sh\n")
	if !ok || strings.Count(text[:len(text)-len(rest)], "\n") > 4 {
		t.Fatal("README.md does not open with a sh block after its title")
	}
	block, _, _ := strings.Cut(rest, "```\n")
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	cmd := func(ln string) string { // the command, its comment left out
		c, _, _ := strings.Cut(ln, "#")
		return strings.Join(strings.Fields(c), " ")
	}
	if len(lines) != 2 || cmd(lines[0]) != "go run ./cmd/dlock demo" || cmd(lines[1]) != "./test.sh" {
		t.Errorf("README.md's first block is %q; want the two commands, `go run ./cmd/dlock demo` and `./test.sh`", lines)
	}
}
