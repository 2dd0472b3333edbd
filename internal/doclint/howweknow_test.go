package doclint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHowWeKnowNamesRealTests: every test docs/how-we-know.md names as
// the proof of a promise exists, so that a renamed or deleted test cannot
// leave a promise looking attacked when nothing attacks it.
func TestHowWeKnowNamesRealTests(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "how-we-know.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9]*\b`).FindAllString(string(doc), -1)
	if len(named) < 50 {
		t.Fatalf("docs/how-we-know.md names %d tests; its promise table should name many more", len(named))
	}
	// tests of other projects that the page names as the origin of a port
	foreign := map[string]bool{"TestAllocCancelDoesntStarve": true} // x/sync's
	for _, n := range named {
		if !defined[n] && !foreign[n] {
			t.Errorf("docs/how-we-know.md names %s, which no test file defines", n)
		}
	}
}
