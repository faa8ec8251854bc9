// Package docs_test checks the documentation as a reader follows it: every
// relative link leads to a file, and to a heading when it names one; the
// README stays short, links every page of docs/, and shows the test
// command exactly as CI runs it.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// pending are pages that the README links before they exist: each is
// checked like any other page once it does.
var pending = []string{}

// pages returns the Markdown files whose links are checked, relative to
// root.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md", "CHANGELOG.md", "examples/README.md"}
	for _, pattern := range []string{"docs/*.md", "bench/notes/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.ToSlash(rel))
		}
	}
	return files
}

var (
	fence       = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan    = regexp.MustCompile("`[^`]*`")
	link        = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	heading     = regexp.MustCompile(`^(#{1,6})\s+(.+?)\s*#*\s*$`)
	hasScheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the lines of a Markdown file that are not inside fenced
// code blocks, with their numbers (from 1).
func prose(text string) (lines []string, numbers []int) {
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines = append(lines, l)
			numbers = append(numbers, i+1)
		}
	}
	return lines, numbers
}

// slug is the anchor GitHub gives a heading: lower case, spaces as
// hyphens, and only letters, digits, hyphens and underscores kept.
func slug(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings, numbered as
// GitHub numbers repeated ones (-1, -2).
func anchors(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines, _ := prose(string(b))
	seen := map[string]int{}
	var out []string
	for _, l := range lines {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out = append(out, s+"-"+strconv.Itoa(n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"The gateway: `sluice serve`", "the-gateway-sluice-serve"},
		{"How it answers, and how it differs from envoyproxy/ratelimit", "how-it-answers-and-how-it-differs-from-envoyproxyratelimit"},
		{"When Redis fails: on_error", "when-redis-fails-on_error"},
		{"The rate-limit service's metrics", "the-rate-limit-services-metrics"},
		{"Rate-limit service, 2026-11-24, 01:37", "rate-limit-service-2026-11-24-0137"},
	} {
		if got := slug(c.in); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Every relative link of the documentation leads to a file or directory
// of the repository, and an anchor into a Markdown file to one of its
// headings.
func TestLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		lines, numbers := prose(string(b))
		for i, l := range lines {
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if hasScheme.MatchString(target) {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, page)
				if path != "" {
					file = filepath.Join(root, filepath.Dir(page), path)
				}
				rel, err := filepath.Rel(root, file)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: %s leads out of the repository", page, numbers[i], target)
					continue
				}
				rel = filepath.ToSlash(rel)
				if _, err := os.Stat(file); err != nil {
					if !slices.Contains(pending, rel) {
						t.Errorf("%s:%d: %s: no such file %s", page, numbers[i], target, rel)
					}
					continue
				}
				if anchor == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				if !slices.Contains(anchors(t, file), anchor) {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", page, numbers[i], target, rel, anchor)
				}
			}
		}
	}
}

// The README and BENCHMARKS.md stay short enough to read in minutes;
// details go to docs/ and bench/notes/.
func TestShortPages(t *testing.T) {
	for _, c := range []struct {
		page string
		max  int
	}{{"README.md", 300}, {"BENCHMARKS.md", 250}} {
		b, err := os.ReadFile(filepath.Join(root, c.page))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n >= c.max {
			t.Errorf("%s has %d lines, want fewer than %d: move details to a page they belong on", c.page, n, c.max)
		}
	}
}

// The README links every page of docs/.
func TestREADMELinksEveryPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, m := range link.FindAllStringSubmatch(string(b), -1) {
		path, _, _ := strings.Cut(m[1], "#")
		linked[path] = true
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(docs, pending...) {
		p := "docs/" + filepath.Base(d)
		if !linked[p] {
			t.Errorf("README.md does not link %s", p)
		}
	}
}

// The README's test command is the one CI runs: the last line of .ci/run,
// byte for byte, as a line of its own.
func TestREADMETestCommand(t *testing.T) {
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(ci), "\n"), "\n")
	command := lines[len(lines)-1]
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(readme), "\n"), command) {
		t.Errorf("README.md does not show .ci/run's test command as a line of its own:\n%s", command)
	}
}
