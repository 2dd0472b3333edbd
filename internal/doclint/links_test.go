package doclint

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestRelativeLinksResolve: every relative link of README.md and
// docs/*.md names a file or directory of the repository, and its anchor
// (#...) a heading of the Markdown file it points to, spelled as GitHub
// makes anchors of headings. Links in code (fenced blocks, `spans`) are
// not links and are skipped; links with a scheme (https:, mailto:) are
// not checked.
func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(src)) {
			checked++
			if msg := resolveLink(root, page, l.target); msg != "" {
				t.Errorf("%s:%d: link %q: %s", rel(root, page), l.line, l.target, msg)
			}
		}
	}
	if checked < 20 {
		t.Errorf("found %d relative links in README.md and docs/; the parser is probably broken", checked)
	}
}

type mdLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative link targets of a Markdown text,
// inline ([text](target)) and reference ([name]: target) alike, with the
// line each is on; code is blanked first.
func markdownLinks(text string) []mdLink {
	text = blankCode(text)
	var out []mdLink
	add := func(locs [][]int) {
		for _, m := range locs {
			target := text[m[2]:m[3]]
			if scheme.MatchString(target) {
				continue
			}
			out = append(out, mdLink{line: 1 + strings.Count(text[:m[0]], "\n"), target: target})
		}
	}
	add(inlineLink.FindAllStringSubmatchIndex(text, -1))
	add(refLink.FindAllStringSubmatchIndex(text, -1))
	return out
}

// blankCode replaces fenced code blocks and inline code spans by spaces,
// keeping the newlines, so that what they show is not read as links and
// line numbers stay right.
func blankCode(text string) string {
	lines := strings.SplitAfter(text, "\n")
	fence := ""
	for i, ln := range lines {
		trimmed := strings.TrimLeft(ln, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			lines[i] = blank(ln)
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = blank(ln)
			continue
		}
		lines[i] = blankSpans(ln)
	}
	return strings.Join(lines, "")
}

func blank(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		return ' '
	}, s)
}

// blankSpans blanks the `code spans` of one line (a span does not cross
// lines in these docs).
func blankSpans(ln string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(ln, '`')
		if i < 0 {
			b.WriteString(ln)
			return b.String()
		}
		n := i
		for n < len(ln) && ln[n] == '`' {
			n++
		}
		ticks := ln[i:n]
		j := strings.Index(ln[n:], ticks)
		if j < 0 {
			b.WriteString(ln)
			return b.String()
		}
		b.WriteString(ln[:i])
		b.WriteString(blank(ln[i : n+j+len(ticks)]))
		ln = ln[n+j+len(ticks):]
	}
}

// resolveLink says what is wrong with a relative link of page, or "".
func resolveLink(root, page, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		if strings.HasPrefix(path, "/") {
			file = filepath.Join(root, filepath.FromSlash(path))
		} else {
			file = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
		}
		if r, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(r, "..") {
			return "points outside the repository"
		}
		if _, err := os.Stat(file); err != nil {
			return "no such file: " + rel(root, file)
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return "an anchor into a file that is not Markdown"
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	if !headingAnchors(string(src))[anchor] {
		return "no heading of " + rel(root, file) + " has the anchor #" + anchor
	}
	return ""
}

var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: a heading's text in lower case, each space made '-',
// every other character but letters, digits, '-' and '_' dropped; the
// second heading of one anchor gets "-1", the third "-2".
func headingAnchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, ln := range strings.Split(blankFences(text), "\n") {
		m := atxHeading.FindStringSubmatch(ln)
		if m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			seen[a]++
			a = a + "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// blankFences blanks fenced code blocks only (a '#' line in a shell block
// is a comment, not a heading).
func blankFences(text string) string {
	lines := strings.SplitAfter(text, "\n")
	fence := ""
	for i, ln := range lines {
		trimmed := strings.TrimLeft(ln, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = blank(ln)
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = blank(ln)
		}
	}
	return strings.Join(lines, "")
}

var (
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// slug is GitHub's anchor of a heading's text.
func slug(h string) string {
	h = mdLinkText.ReplaceAllString(h, "$1") // a link in a heading counts by its text
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug: the anchors GitHub makes of headings like the docs' own.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Managed Redis": "managed-redis",
		"The CLI: `dlock run`, `leader`, `inspect`, `ls`, `top`, `unlock --force`":           "the-cli-dlock-run-leader-inspect-ls-top-unlock---force",
		"Issue 35, last: what the protocol leaves, and what a hold as one string would take": "issue-35-last-what-the-protocol-leaves-and-what-a-hold-as-one-string-would-take",
		"Issue 17: one process, one client — BenchmarkOneClient":                             "issue-17-one-process-one-client--benchmarkoneclient",
		"(2) Contended: p99 wait ≤ ⅓ of the best anchor's":                                   "2-contended-p99-wait---of-the-best-anchors",
		"See [the guide](guide.md) first":                                                    "see-the-guide-first",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	a := headingAnchors("# A\n\n```sh\n# not a heading\n```\n## A\n## A\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !a[want] {
			t.Errorf("headingAnchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("headingAnchors read a shell comment in a code block as a heading")
	}
}
