package doclint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/dlock-go/dlock"

// TestImportOrder: the packages of the library import one way, as
// docs/layout.md's "Import order" lists them: a package imports only
// packages of a lower layer (tests aside), so that no internal package
// reaches the root or a package above it. A package of the module that
// the library's code imports must be listed; a listed package that does
// not exist yet is skipped.
func TestImportOrder(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	layout, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	layer := map[string]int{} // package dir (module-relative, "." the root) -> layer
	for _, m := range regexp.MustCompile(`(?m)^layer (\d+) +(.+)$`).FindAllStringSubmatch(string(layout), -1) {
		n, _ := strconv.Atoi(m[1])
		for _, p := range strings.Fields(m[2]) {
			if p == "dlock" {
				p = "."
			}
			layer[p] = n
		}
	}
	if len(layer) < 5 || layer["."] == 0 {
		t.Fatalf("docs/layout.md's import order lists %v: want lines 'layer <n>  <package> ...', the root (dlock) last", layer)
	}
	fset := token.NewFileSet()
	for dir, n := range layer {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if path != module && !strings.HasPrefix(path, module+"/") {
					continue
				}
				dep := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
				if dep == "" {
					dep = "."
				}
				m, listed := layer[dep]
				switch {
				case !listed:
					t.Errorf("%s imports %s, which docs/layout.md's import order does not list", rel(root, f), dep)
				case m >= n:
					t.Errorf("%s (layer %d) imports %s (layer %d): imports run from a higher layer to a lower one only", rel(root, f), n, dep, m)
				}
			}
		}
	}
}

func rel(root, f string) string {
	r, _ := filepath.Rel(root, f)
	return r
}
