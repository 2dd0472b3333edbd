package doclint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCommentsNameWhatExists: a comment that names an identifier, a
// file or a part of a file names one that exists, so that a rename or a
// removal that leaves a comment behind fails the tests. Every Go file of
// the repository's four modules (root, bench, cmd/dlock, fence/pgfence;
// tests included) is parsed, and what it declares collected: package
// names, types, functions, methods, fields, constants and variables;
// and the words of the Lua scripts. Then, in every comment:
//
//   - a qualified reference, pkg.Name, Type.Member, pkg.Type.Member or
//     (*T).M, resolves: a package of the repository must declare Name,
//     a type of it must have Member (a method, a field, or a member of
//     a type it embeds); a standard package must export Name (its source
//     in GOROOT is read); another module's package is accepted when the
//     repository imports it. A lower-case member of a variable (c.life,
//     k.done) must be a field or method of the comment's package;
//   - a backquoted identifier (`Name`, `pkg.Name`) exists, as above or
//     as any identifier of the Go code or the Lua scripts;
//   - a file name, x.go, x.lua or x.md, with a path (docs/x.md,
//     internal/hold/hold.go, scripts/lock.lua) or without, names a file
//     of the repository: the path from the repository's root, the
//     module's, the comment's directory, or the end of one;
//   - a part of a file named by its heading ("Late commands" in
//     internal/hold/hold.go; see "Who reads") is a heading of that file
//     (of any, when none is named): a Markdown or Go doc heading, or a
//     comment's paragraph that begins with it;
//   - dlock.x.y, all lower case, is an OpenTelemetry instrument or
//     attribute (dlock.leases.held): the code has it as a string;
//   - a doc comment that begins with a name begins with the declared one
//     (not bounded above Bounded: the name before a rename).
//
// Prose that only looks like a reference is told apart by design, not
// by listing it: e.g. and i.e., a domain or a path (followed by /), a
// file extension, a version, a double-quoted value that the code has as
// a string ("dlock.Lock", a span's name), a word after a dot that no
// code declares as a variable (fs.Args where fs is a flag set is
// checked against the package's variables, not io/fs). notNames holds
// the few exceptions left, each with its reason; this file's own
// comments, which show the forms, are not read.
func TestCommentsNameWhatExists(t *testing.T) {
	start := time.Now()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	r := loadRepo(t, root)
	// The files are checked in parallel (the race detector makes the
	// regular expressions some five times slower), then reported in order.
	found := make([][]string, len(r.files))
	counts := make([]int, len(r.files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				f := r.files[i]
				for _, cg := range f.ast.Comments {
					for _, c := range cg.List {
						counts[i]++
						for _, msg := range r.check(f, c.Text) {
							found[i] = append(found[i], fmt.Sprintf("%s:%d: %s", rel(root, f.path), r.fset.Position(c.Pos()).Line, msg))
						}
					}
				}
				for _, d := range docsOf(f.ast) {
					if msg := r.checkDoc(f, d); msg != "" {
						found[i] = append(found[i], fmt.Sprintf("%s:%d: %s", rel(root, f.path), r.fset.Position(d.doc.Pos()).Line, msg))
					}
				}
			}
		})
	}
	for i, f := range r.files {
		if f.path != filepath.Join(root, "internal", "doclint", "names_test.go") { // its comments show the forms it checks
			next <- i
		}
	}
	close(next)
	wg.Wait()
	n := 0
	for i := range r.files {
		n += counts[i]
		for _, msg := range found[i] {
			t.Error(msg)
		}
	}
	for name := range notNames {
		if !r.used[name] {
			t.Errorf("notNames lists %s, which no comment names any more: drop it", name)
		}
	}
	if n < 5000 || len(r.pkgs) < 30 {
		t.Errorf("read %d comments in %d packages; the walk is probably broken", n, len(r.pkgs))
	}
	t.Logf("%d comments in %d files of %d packages, in %v", n, len(r.files), len(r.pkgs), time.Since(start))
}

// notNames: words of comments that look like references and are not,
// each for a reason the rules cannot tell.
var notNames = map[string]string{
	"TESTING.md": "the design's testing page (design/TESTING.md), kept beside the repository, not in it",
}

// repo is what the repository declares.
type repo struct {
	root  string
	fset  *token.FileSet
	files []*srcFile
	pkgs  map[string]*pkgInfo   // by directory
	names map[string][]*pkgInfo // by package name
	// every identifier of the Go code (declared or used) and of the Lua
	// scripts: what a backquoted word may name
	idents map[string]bool
	// the values of the string literals of the Go code
	strs map[string]bool
	// every file of the repository, by path from the root, and by base name
	paths, bases map[string]bool
	// the import names of the packages of other modules the repository imports
	foreign map[string]bool
	std     *stdlib
	mu      sync.Mutex                 // guards used and heads: files are checked in parallel
	used    map[string]bool            // the entries of notNames met
	heads   map[string]map[string]bool // path -> the headings of the file
}

type srcFile struct {
	path    string
	ast     *ast.File
	pkg     *pkgInfo
	imports map[string]string // name -> import path
	modRoot string
}

// pkgInfo is one package directory's declarations (its _test package
// merged in).
type pkgInfo struct {
	dir, path string
	names     map[string]bool            // its package names
	decls     map[string]bool            // top-level names
	members   map[string]map[string]bool // type -> methods and fields
	embeds    map[string][]ast.Expr      // type -> the types it embeds
	fields    map[string]bool            // every field and method name of its types
	vars      map[string]bool            // every name it declares a variable, parameter or field as
}

func loadRepo(t *testing.T, root string) *repo {
	t.Helper()
	r := &repo{root: root, fset: token.NewFileSet(), pkgs: map[string]*pkgInfo{}, names: map[string][]*pkgInfo{},
		idents: map[string]bool{}, strs: map[string]bool{}, used: map[string]bool{}, heads: map[string]map[string]bool{}, paths: map[string]bool{}, bases: map[string]bool{}, foreign: map[string]bool{}}
	var gos []string
	mods := map[string]string{} // module root dir -> module path
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if b, err := os.ReadFile(filepath.Join(path, "go.mod")); err == nil {
				if m := moduleLine.FindSubmatch(b); m != nil {
					mods[path] = string(m[1])
				}
			}
			r.paths[rel(root, path)] = true
			return nil
		}
		r.paths[rel(root, path)] = true
		r.bases[name] = true
		switch filepath.Ext(name) {
		case ".go":
			gos = append(gos, path)
		case ".lua":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(b), -1) {
				r.idents[w] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Parse in parallel: some 360 files, 2.5 MB.
	asts := make([]*ast.File, len(gos))
	errs := make([]error, len(gos))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, p := range gos {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			asts[i], errs[i] = parser.ParseFile(r.fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		}()
	}
	wg.Wait()
	for i, p := range gos {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		dir := filepath.Dir(p)
		pi := r.pkgs[dir]
		if pi == nil {
			modRoot := dir
			for mods[modRoot] == "" && modRoot != root {
				modRoot = filepath.Dir(modRoot)
			}
			pi = &pkgInfo{dir: dir, path: strings.TrimSuffix(mods[modRoot]+"/"+filepath.ToSlash(rel(modRoot, dir)), "/."),
				names: map[string]bool{}, decls: map[string]bool{}, members: map[string]map[string]bool{},
				embeds: map[string][]ast.Expr{}, fields: map[string]bool{}, vars: map[string]bool{}}
			r.pkgs[dir] = pi
		}
		f := &srcFile{path: p, ast: asts[i], pkg: pi, imports: map[string]string{}}
		for m := dir; ; m = filepath.Dir(m) {
			if mods[m] != "" || m == root {
				f.modRoot = m
				break
			}
		}
		r.files = append(r.files, f)
		name := asts[i].Name.Name
		if !pi.names[name] {
			pi.names[name] = true
			r.names[name] = append(r.names[name], pi)
		}
		pi.collect(asts[i])
		ast.Inspect(asts[i], func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				r.idents[n.Name] = true
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if v, err := strconv.Unquote(n.Value); err == nil {
						r.strs[v] = true
					}
				}
			}
			return true
		})
	}
	// Imports, once every package of the repository is known.
	mine := map[string]bool{}
	for _, pi := range r.pkgs {
		mine[pi.path] = true
	}
	r.std = newStdlib(t)
	for _, f := range r.files {
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			names := importNames(path)
			if imp.Name != nil && imp.Name.Name != "_" && imp.Name.Name != "." {
				names = []string{imp.Name.Name}
			}
			for _, n := range names {
				f.imports[n] = path
				if !mine[path] && !r.std.has(path) {
					r.foreign[n] = true
				}
			}
		}
	}
	return r
}

// importNames returns the names a package of path is likely declared
// as: its last element, without a version suffix (/v9) or a "go-" or
// "-go" (go-redis is redis, valkey-go valkey).
func importNames(path string) []string {
	els := strings.Split(path, "/")
	last := els[len(els)-1]
	if versionEl.MatchString(last) && len(els) > 1 {
		last = els[len(els)-2]
	}
	out := []string{last}
	for _, s := range []string{strings.TrimPrefix(last, "go-"), strings.TrimSuffix(last, "-go"), strings.ReplaceAll(last, "-", "")} {
		if s != last {
			out = append(out, s)
		}
	}
	return out
}

// collect adds f's declarations to p.
func (p *pkgInfo) collect(f *ast.File) {
	member := func(typ, name string) {
		if p.members[typ] == nil {
			p.members[typ] = map[string]bool{}
		}
		p.members[typ][name] = true
		p.fields[name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				p.decls[d.Name.Name] = true
				continue
			}
			if typ := baseType(d.Recv.List[0].Type); typ != "" {
				member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					p.decls[s.Name.Name] = true
					typ := s.Name.Name
					if p.members[typ] == nil {
						p.members[typ] = map[string]bool{}
					}
					var list *ast.FieldList
					switch st := s.Type.(type) {
					case *ast.StructType:
						list = st.Fields
					case *ast.InterfaceType:
						list = st.Methods
					}
					if list == nil {
						continue
					}
					for _, fl := range list.List {
						if len(fl.Names) == 0 { // embedded
							if n := baseType(fl.Type); n != "" {
								member(typ, n)
							}
							p.embeds[typ] = append(p.embeds[typ], fl.Type)
							continue
						}
						for _, n := range fl.Names {
							member(typ, n.Name)
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.decls[n.Name] = true
					}
				}
			}
		}
	}
	// fields of struct types declared anywhere (locals, literals) and
	// keys of composite literals count as members of the package
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			for _, nm := range n.Names {
				p.vars[nm.Name] = true
			}
		case *ast.ValueSpec:
			for _, nm := range n.Names {
				p.vars[nm.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						p.vars[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id, ok := e.(*ast.Ident); ok {
					p.vars[id.Name] = true
				}
			}
		case *ast.StructType:
			for _, fl := range n.Fields.List {
				for _, nm := range fl.Names {
					p.fields[nm.Name] = true
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				p.fields[id.Name] = true
			}
		}
		return true
	})
}

// baseType returns the name of a (receiver or embedded) type: T of T,
// *T, T[K], pkg.T.
func baseType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// stdlib is the standard library's packages, read from GOROOT's source
// when a comment names one: its exported top-level names.
type stdlib struct {
	src   string
	dirs  map[string][]string // package name (last element) -> import paths
	paths map[string]bool
	mu    sync.Mutex
	decls map[string]map[string]bool // import path -> exported names
}

func newStdlib(t *testing.T) *stdlib {
	t.Helper()
	goroot := os.Getenv("GOROOT")
	if goroot == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatal(err)
		}
		goroot = strings.TrimSpace(string(out))
	}
	s := &stdlib{src: filepath.Join(goroot, "src"), dirs: map[string][]string{}, paths: map[string]bool{}, decls: map[string]map[string]bool{}}
	err := filepath.WalkDir(s.src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		r, _ := filepath.Rel(s.src, path)
		if r == "." {
			return nil
		}
		n := d.Name()
		if n == "testdata" || n == "vendor" || n == "internal" || r == "cmd" || strings.HasPrefix(n, ".") {
			return filepath.SkipDir
		}
		p := filepath.ToSlash(r)
		s.paths[p] = true
		s.dirs[n] = append(s.dirs[n], p)
		return nil
	})
	if err != nil || len(s.paths) < 100 {
		t.Fatalf("reading the standard library in %s: %v (%d packages)", s.src, err, len(s.paths))
	}
	return s
}

func (s *stdlib) has(path string) bool { return s.paths[path] }

// exports returns the exported top-level names of the standard package
// at path, and methods as "Type.Method".
func (s *stdlib) exports(path string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.decls[path]; ok {
		return d
	}
	d := map[string]bool{}
	s.decls[path] = d
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(s.src, path, "*.go"))
	for _, fn := range files {
		if strings.HasSuffix(fn, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, fn, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		p := &pkgInfo{decls: d, members: map[string]map[string]bool{}, embeds: map[string][]ast.Expr{}, fields: map[string]bool{}, vars: map[string]bool{}}
		p.collect(f)
		for typ, ms := range p.members {
			for m := range ms {
				d[typ+"."+m] = true
			}
		}
	}
	return d
}

var (
	// (*T).M, (*pkg.T).M
	methodExpr = regexp.MustCompile(`\(\*((?:[A-Za-z_]\w*\.)?[A-Za-z_]\w*)\)\.([A-Za-z_]\w*)`)
	// a.b, a.b.c, a.b.c.d: not inside a longer dotted or slashed word
	qualified = regexp.MustCompile(`(^|[^\w./*-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`)
	// a file name: x.go, x.lua, x.md, with a path or not
	fileName     = regexp.MustCompile(`(^|[^\w./-])((?:\.\./|[\w-]+/)*[\w-]+\.(?:go|lua|md))\b`)
	backquoted   = regexp.MustCompile("`([^`\n]+)`")
	identLike    = regexp.MustCompile(`^\*?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$`)
	allCaps      = regexp.MustCompile(`^[A-Z0-9_]+$`)
	urlLike      = regexp.MustCompile(`\b[a-z][a-z0-9+.-]*://\S*`)
	doubleQuoted = regexp.MustCompile(`"[^"\n]*"`)
	// a part of a file by its heading: "Heading" in x.go, x.go's
	// "Heading", x.go, "Heading"; or see "Heading" (a part of any file)
	headingRefs = regexp.MustCompile(`"([A-Z][^"\n]{2,60})" in (?:the root's )?((?:[\w-]+/)*[\w-]+\.(?:go|lua|md))|((?:[\w-]+/)*[\w-]+\.(?:go|lua|md))(?:'s)?,? "([A-Z][^"\n]{2,60})"`)
	seeHeading  = regexp.MustCompile(`(?:^|[^\w])[Ss]ee ()()()"([A-Z][^"\n]{2,60})"`)
	otelName    = regexp.MustCompile(`^dlock(?:\.[a-z_]+)+$`)

	moduleLine   = regexp.MustCompile(`(?m)^module\s+(\S+)`)
	word         = regexp.MustCompile(`[A-Za-z_]\w*`)
	versionEl    = regexp.MustCompile(`^v\d+$`)
	leadingDigit = regexp.MustCompile(`^v?\d`)
)

// notMembers: the last element of a dotted word that says it is a file
// name, a domain or a host, not a reference.
var notMembers = map[string]bool{
	"com": true, "org": true, "io": true, "net": true, "dev": true, "conf": true, "json": true, "txt": true,
	"sh": true, "html": true, "yaml": true, "yml": true, "mod": true, "sum": true, "work": true, "so": true,
	"c": true, "h": true, "out": true, "log": true, "rdb": true, "aof": true, "pem": true, "key": true,
	"crt": true, "csv": true, "svg": true, "png": true, "toml": true, "lua": true, "go": true, "md": true,
}

// prose: dotted words of English, not references.
var prose = map[string]bool{"e.g": true, "i.e": true, "a.k.a": true, "vs": true, "etc": true, "cf": true}

// check returns what is stale in text, a comment of f.
func (r *repo) check(f *srcFile, text string) []string {
	var out []string
	if !strings.ContainsAny(text, ".`\"") {
		return nil // nothing dotted, backquoted or quoted: no reference
	}
	if strings.Contains(text, "://") {
		text = urlLike.ReplaceAllString(text, " ")
	}
	seen := map[string]bool{}
	report := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !seen[msg] {
			seen[msg] = true
			out = append(out, msg)
		}
	}
	var files [][]string
	if strings.Contains(text, ".go") || strings.Contains(text, ".lua") || strings.Contains(text, ".md") {
		files = fileName.FindAllStringSubmatch(text, -1)
	}
	for _, m := range files {
		name := m[2]
		if r.fileExists(f, name) {
			continue
		}
		if notNames[filepath.Base(name)] != "" {
			r.mu.Lock()
			r.used[filepath.Base(name)] = true
			r.mu.Unlock()
			continue
		}
		report("names the file %s, which does not exist", name)
	}
	var refs [][]string
	if strings.Contains(text, `"`) {
		refs = headingRefs.FindAllStringSubmatch(text, -1)
		refs = append(refs, seeHeading.FindAllStringSubmatch(headingRefs.ReplaceAllString(text, " "), -1)...)
	}
	for _, m := range refs {
		heading, file := m[1]+m[4], m[2]+m[3]
		if file != "" && !r.fileExists(f, file) {
			continue // reported above
		}
		if !r.headed(f, heading, file) {
			where := file
			if where == "" {
				where = "the repository"
			}
			report("names the part %q of %s, which has no such heading", heading, where)
		}
	}
	plain := text
	if strings.Contains(text, "(*") {
		for _, m := range methodExpr.FindAllStringSubmatch(text, -1) {
			if msg := r.resolve(f, strings.Split(m[1]+"."+m[2], "."), true); msg != "" {
				report("(*%s).%s: %s", m[1], m[2], msg)
			}
		}
		plain = methodExpr.ReplaceAllString(text, " ")
	}
	var quoted [][]string
	if strings.Contains(plain, "`") {
		quoted = backquoted.FindAllStringSubmatch(plain, -1)
		plain = backquoted.ReplaceAllString(plain, " ")
	}
	for _, m := range quoted {
		w := strings.TrimSuffix(strings.TrimPrefix(m[1], "*"), "()")
		if !identLike.MatchString(m[1]) || allCaps.MatchString(w) {
			continue
		}
		els := strings.Split(w, ".")
		if len(els) == 1 {
			if !r.idents[w] && !builtin[w] {
				report("`%s` names no identifier of the code or the scripts", w)
			}
			continue
		}
		if isFile(w) {
			continue
		}
		if msg := r.resolve(f, els, true); msg != "" {
			report("`%s`: %s", w, msg)
		}
	}
	// A double-quoted dotted word is a value (a span's name) when the
	// code has it as a string; else it is checked as any other.
	if strings.Contains(plain, `"`) {
		plain = doubleQuoted.ReplaceAllStringFunc(plain, func(q string) string {
			if r.strs[q[1:len(q)-1]] {
				return " "
			}
			return q
		})
	}
	if !strings.Contains(plain, ".") {
		return out
	}
	for _, m := range qualified.FindAllStringSubmatchIndex(plain, -1) {
		w := plain[m[4]:m[5]]
		if end := m[5]; end < len(plain) && (plain[end] == '/' || plain[end] == '-' || plain[end] == '@') {
			continue // a path, a host, a module: github.com/x, redis.io/docs
		}
		if prose[strings.ToLower(w)] || isFile(w) {
			continue
		}
		els := strings.Split(w, ".")
		if otelName.MatchString(w) {
			// dlock's OpenTelemetry instruments and attributes
			// (dlock.leases.held, dlock.reason), never Go: the root's
			// unexported names are not written qualified. The code must
			// name it as a string.
			if !r.strs[w] {
				report("%s: no instrument or attribute of the code is named so", w)
			}
			continue
		}
		if prose[els[0]] || leadingDigit.MatchString(els[len(els)-1]) {
			continue
		}
		if msg := r.resolve(f, els, false); msg != "" {
			report("%s: %s", w, msg)
		}
	}
	return out
}

// isFile reports whether a dotted word is a file name or a host.
func isFile(w string) bool {
	els := strings.Split(w, ".")
	return notMembers[els[len(els)-1]]
}

// resolve checks a qualified reference, els split at its dots; strict:
// a backquoted or (*T).M reference, which is code for sure.
func (r *repo) resolve(f *srcFile, els []string, strict bool) string {
	x, rest := els[0], els[1:]
	// a package: the file's import, the file's own package, one of the repository's
	if path, ok := f.imports[x]; ok {
		if pi := r.byPath(path); pi != nil {
			return r.inPackage([]*pkgInfo{pi}, x, rest)
		}
		if r.std.has(path) {
			return r.inStd([]string{path}, x, rest)
		}
		return "" // another module's package, imported
	}
	if f.pkg.names[x] && !r.isLocalType(f.pkg, x) {
		return r.inPackage([]*pkgInfo{f.pkg}, x, rest)
	}
	// a type of the comment's package
	if _, ok := f.pkg.members[x]; ok {
		return r.inType([]*pkgInfo{f.pkg}, x, rest)
	}
	if pis := r.names[x]; len(pis) > 0 && x != "main" {
		return r.inPackage(pis, x, rest)
	}
	if paths := r.std.dirs[x]; len(paths) > 0 {
		// not imported here: x may be a variable named as the package
		// (fs, a flag set), when the package declares one so
		if r.inStd(paths, x, rest) == "" || strict || !f.pkg.vars[x] {
			return r.inStd(paths, x, rest)
		}
	}
	if r.foreign[x] {
		return ""
	}
	// a type of another package of the repository, unless x is a field
	// of the comment's package (a.Spec.Member: x is then a variable's)
	var owners []*pkgInfo
	if f.pkg.fields[x] {
		return r.asVariable(f, x, rest, strict)
	}
	for _, pi := range r.pkgs {
		if _, ok := pi.members[x]; ok {
			owners = append(owners, pi)
		}
	}
	if len(owners) > 0 {
		return r.inType(owners, x, rest)
	}
	return r.asVariable(f, x, rest, strict)
}

// asVariable checks x.rest where x is a variable: its lower-case members
// are the package's fields and methods; an exported one may be any
// type's, of any package.
func (r *repo) asVariable(f *srcFile, x string, rest []string, strict bool) string {
	for _, m := range rest {
		if ast.IsExported(m) {
			return ""
		}
		if !f.pkg.fields[m] {
			if !strict && len(x) > 1 && !f.pkg.fields[x] && !r.idents[x] {
				return "" // x is no name of the code: prose
			}
			return fmt.Sprintf("%s names no field or method of package %s", m, f.pkg.path)
		}
	}
	return ""
}

func (r *repo) byPath(path string) *pkgInfo {
	for _, pi := range r.pkgs {
		if pi.path == path {
			return pi
		}
	}
	return nil
}

// isLocalType reports whether x is also a type of p (a package named as
// its type: its type wins).
func (r *repo) isLocalType(p *pkgInfo, x string) bool {
	_, ok := p.members[x]
	return ok
}

// inPackage checks Name[.Member] in one of pis.
func (r *repo) inPackage(pis []*pkgInfo, x string, rest []string) string {
	name := rest[0]
	for _, pi := range pis {
		if pi.decls[name] {
			if len(rest) == 1 {
				return ""
			}
			if _, ok := pi.members[name]; !ok {
				return "" // a var or func: its members are not known here
			}
			if r.inType([]*pkgInfo{pi}, name, rest[1:]) == "" {
				return ""
			}
		}
	}
	if len(pis) == 1 {
		if !pis[0].decls[name] {
			return fmt.Sprintf("package %s declares no %s", pis[0].path, name)
		}
		return r.inType(pis, name, rest[1:])
	}
	return fmt.Sprintf("no package named %s declares %s", x, strings.Join(rest, "."))
}

// inType checks that type typ of one of pis has the member rest[0].
func (r *repo) inType(pis []*pkgInfo, typ string, rest []string) string {
	for _, pi := range pis {
		if r.hasMember(pi, typ, rest[0], 0) {
			return ""
		}
	}
	return fmt.Sprintf("type %s has no method or field %s", typ, rest[0])
}

// hasMember reports whether typ of pi has m, itself or through a type
// it embeds; a type embedded from another module has any.
func (r *repo) hasMember(pi *pkgInfo, typ, m string, depth int) bool {
	if pi.members[typ][m] {
		return true
	}
	if depth > 5 {
		return false
	}
	for _, e := range pi.embeds[typ] {
		base := baseType(e)
		for unwrapped := false; !unwrapped; {
			switch x := e.(type) {
			case *ast.StarExpr:
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.IndexListExpr:
				e = x.X
			default:
				unwrapped = true
			}
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok { // a type of pi
			if r.hasMember(pi, base, m, depth+1) {
				return true
			}
			continue
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		// pkg.T: the repository's; a standard one (whose own embeds are
		// not followed); else another module's, which has any member
		known := false
		for _, p2 := range r.names[id.Name] {
			if _, ok := p2.members[base]; ok {
				known = true
				if r.hasMember(p2, base, m, depth+1) {
					return true
				}
			}
		}
		for _, p := range r.std.dirs[id.Name] {
			known = true
			if r.std.exports(p)[base+"."+m] {
				return true
			}
		}
		if !known {
			return true
		}
	}
	return false
}

// inStd checks Name of a standard package (a member of it is not
// followed: a field, or a method promoted from an embedded type).
func (r *repo) inStd(paths []string, x string, rest []string) string {
	for _, p := range paths {
		if r.std.exports(p)[rest[0]] {
			return ""
		}
	}
	if !ast.IsExported(rest[0]) {
		return "" // a variable named as the package: x.field
	}
	sort.Strings(paths)
	return fmt.Sprintf("package %s exports no %s", strings.Join(paths, " or "), rest[0])
}

// fileExists reports whether name, a file named in a comment of f,
// exists: from the repository's root, f's module, f's directory, or as
// the end of a path of the repository.
func (r *repo) fileExists(f *srcFile, name string) bool {
	if !strings.Contains(name, "/") {
		return r.bases[name]
	}
	for _, base := range []string{r.root, f.modRoot, filepath.Dir(f.path)} {
		if _, err := os.Stat(filepath.Join(base, name)); err == nil {
			return true
		}
	}
	for p := range r.paths {
		if strings.HasSuffix(p, "/"+name) {
			return true
		}
	}
	return false
}

// builtin: Go's predeclared identifiers and keywords.
var builtin = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`append cap clear close complex copy delete imag len make max min new panic print println real recover
		bool byte comparable complex64 complex128 error float32 float64 int int8 int16 int32 int64 rune string uint uint8 uint16 uint32 uint64 uintptr any
		true false iota nil
		break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var`) {
		m[w] = true
	}
	return m
}()

// A documented declaration: its name and its doc comment.
type documented struct {
	name string
	doc  *ast.CommentGroup
}

// docsOf returns f's documented declarations of one name: functions,
// methods, types, and constants and variables declared one a line.
func docsOf(f *ast.File) []documented {
	var out []documented
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Doc != nil {
				out = append(out, documented{d.Name.Name, d.Doc})
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				doc := d.Doc
				if len(d.Specs) > 1 || d.Lparen.IsValid() {
					doc = nil // a group's comment is the group's
				}
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Doc != nil {
						doc = s.Doc
					}
					if doc != nil {
						out = append(out, documented{s.Name.Name, doc})
					}
				case *ast.ValueSpec:
					if s.Doc != nil {
						doc = s.Doc
					}
					if doc != nil && len(s.Names) == 1 {
						out = append(out, documented{s.Names[0].Name, doc})
					}
				}
			}
		}
	}
	return out
}

var firstWord = regexp.MustCompile(`^\s*([A-Za-z_]\w*)\b`)

// checkDoc: a doc comment that starts with a name starts with the
// declared one. A first word that is the name in another case (bounded
// above Bounded), or a name in mixed case that the code does not
// declare (a renamed function's old name), is stale.
func (r *repo) checkDoc(f *srcFile, d documented) string {
	m := firstWord.FindStringSubmatch(d.doc.Text())
	if m == nil || m[1] == d.name {
		return ""
	}
	w := m[1]
	switch {
	case strings.EqualFold(w, d.name):
		return fmt.Sprintf("the doc comment of %s begins with %s", d.name, w)
	case mixedCase(w) && !r.idents[w]:
		return fmt.Sprintf("the doc comment of %s begins with %s, which the code does not declare", d.name, w)
	}
	return ""
}

// mixedCase reports whether w is written as an identifier of code is,
// not as a word: a capital after its first letter (handOff, ReadTimeout).
func mixedCase(w string) bool {
	return strings.ContainsAny(w[1:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ContainsAny(w, "abcdefghijklmnopqrstuvwxyz")
}

// headed reports whether heading begins a part of file (a name as a
// comment names it; "" for any file of the repository): a Markdown
// heading, a Go doc heading, or a paragraph of a comment that begins
// with it and a full stop or a colon (Who reads. A caller...).
func (r *repo) headed(f *srcFile, heading, file string) bool {
	var paths []string
	if file == "" {
		for p := range r.paths {
			if strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".md") {
				paths = append(paths, filepath.Join(r.root, p))
			}
		}
	} else {
		for _, base := range []string{r.root, f.modRoot, filepath.Dir(f.path)} {
			if _, err := os.Stat(filepath.Join(base, file)); err == nil {
				paths = append(paths, filepath.Join(base, file))
			}
		}
		for p := range r.paths {
			if p == file || strings.HasSuffix(p, "/"+file) {
				paths = append(paths, filepath.Join(r.root, p))
			}
		}
	}
	for _, p := range paths {
		if r.headings(p)[heading] {
			return true
		}
	}
	return false
}

// headings returns the headings of the file at path (see headed), read once.
func (r *repo) headings(path string) map[string]bool {
	r.mu.Lock()
	h, ok := r.heads[path]
	r.mu.Unlock()
	if ok {
		return h
	}
	h = map[string]bool{}
	defer func() {
		r.mu.Lock()
		r.heads[path] = h
		r.mu.Unlock()
	}()
	b, err := os.ReadFile(path)
	if err != nil {
		return h
	}
	for _, line := range strings.Split(string(b), "\n") {
		l := strings.TrimLeft(line, " \t")
		for _, p := range []string{"//", "--", "#", "*"} {
			l = strings.TrimLeft(strings.TrimPrefix(l, p), "# \t")
		}
		l = strings.TrimLeft(l, "- *")
		if l == "" || l[0] != '"' && (l[0] < 'A' || l[0] > 'Z') {
			continue // a heading begins with a capital
		}
		if m := headingStart.FindStringSubmatch(l); m != nil {
			h[m[1]] = true
		}
		if l != "" && !strings.ContainsAny(l[len(l)-1:], ".,;:") {
			l = strings.TrimSpace(l)
			h[l] = true // a Go doc or Markdown heading: the line whole,
			if i := strings.IndexAny(l, "(,:"); i > 0 {
				h[strings.TrimSpace(l[:i])] = true // or before its aside: "Heap per held lease (issue 26)"
			}
		}
	}
	return h
}

var headingStart = regexp.MustCompile(`^"?([A-Z][^".:]{2,60}?)"?[.:](?:\s|$)`)
