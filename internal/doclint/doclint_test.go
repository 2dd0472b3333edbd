// Package doclint checks that every exported name of the module's public
// packages has a doc comment, as go doc shows them: a missing one fails
// ./test.sh.
package doclint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// publicDirs lists the directories of the module whose packages users
// import: every one except internal/, cmd/, testdata and other modules.
func publicDirs(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		base := d.Name()
		if rel != "." {
			if base == "internal" || base == "cmd" || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (bench)
			}
		}
		dirs = append(dirs, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func TestEveryExportedNameIsDocumented(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range publicDirs(t, root) {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for name, f := range pkg.Files {
				for _, miss := range undocumented(f) {
					rel, _ := filepath.Rel(root, name)
					t.Errorf("%s:%d: exported %s has no doc comment", rel, fset.Position(miss.pos).Line, miss.what)
				}
			}
		}
	}
}

type missing struct {
	pos  token.Pos
	what string
}

// undocumented lists the exported declarations of f without a doc
// comment: functions, methods of exported types, types, and constants and
// variables (a comment on their group counts).
func undocumented(f *ast.File) []missing {
	var out []missing
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv != nil && !exportedRecv(d.Recv) {
				continue
			}
			out = append(out, missing{d.Pos(), "func " + d.Name.Name})
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
						out = append(out, missing{s.Pos(), "type " + s.Name.Name})
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && d.Doc == nil && s.Comment == nil {
							out = append(out, missing{n.Pos(), d.Tok.String() + " " + n.Name})
						}
					}
				}
			}
		}
	}
	return out
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(r *ast.FieldList) bool {
	if len(r.List) == 0 {
		return false
	}
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.Ident:
		return x.IsExported()
	case *ast.IndexExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.IsExported()
		}
	case *ast.IndexListExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.IsExported()
		}
	}
	return false
}

// TestLayoutNamesEveryFile: docs/layout.md names every source file of the
// root package and every package directory, so that it stays the map of
// the tree.
func TestLayoutNamesEveryFile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	layout, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]bool{}
	for _, w := range strings.Fields(string(layout)) {
		words[strings.TrimSuffix(w, "/")] = true
	}
	files, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := filepath.Base(f); !strings.HasSuffix(name, "_test.go") && !words[name] {
			t.Errorf("docs/layout.md does not name %s", name)
		}
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bench" {
			return filepath.SkipDir
		}
		gos, _ := filepath.Glob(filepath.Join(path, "*.go"))
		if len(gos) == 0 || words[rel] || strings.HasPrefix(rel, "valkeydlock/internal/") {
			return nil
		}
		t.Errorf("docs/layout.md does not name the package %s", rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
