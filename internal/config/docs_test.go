package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/server/backend"
)

type docSection struct {
	name   string // the list's variable, as passed to fields
	prefix string
	fields []string
}

// docSections maps each field list the decoder accepts to the path its
// fields have in docs/config.md: server.listen, rules[].match.path. The
// backends' sections (store.redis, store.redis.quota) come from their
// table, unnamed.
var docSections = append([]docSection{
	{"rootFields", "", rootFields},
	{"serverFields", "server.", serverFields},
	{"storeFields", "store.", storeFields},
	{"clientIPFields", "client_ip.", clientIPFields},
	{"tiersFields", "tiers.", tiersFields},
	{"logFields", "log.", logFields},
	{"accessFields", "log.access.", accessFields},
	{"tracingFields", "tracing.", tracingFields},
	{"ruleFields", "rules[].", ruleFields},
	{"matchFields", "rules[].match.", matchFields},
	{"countFields", "rules[].count.", countFields},
	{"penaltyFields", "rules[].penalty.", penaltyFields},
	{"tierLimitFields", "rules[].tiers.NAME.", tierLimitFields},
	{"adaptiveFields", "rules[].adaptive.", adaptiveFields},
	{"sharesFields", "rules[].adaptive.shares.", sharesFields},
	{"priorityFields", "priority.", priorityFields},
	{"priorityRouteFields", "priority.routes[].", priorityRouteFields},
	{"calendarFields", "rules[].calendar.", calendarFields},
	{"forwardAuthFields", "server.forward_auth.", forwardAuthFields},
	{"upstreamFields", "upstream.", upstreamFields},
	{"serviceFields", "service.", serviceFields},
	{"envoyHeaderFields", "service.envoy_headers.", envoyHeaderFields},
	{"adminFields", "admin.", adminFields},
	{"listFields", "lists.NAME.", listFields},
	{"identityFields", "identity.", identityFields},
	{"jwtFields", "identity.jwt.", jwtFields},
	{"jwtKeyFields", "identity.jwt.keys[].", jwtKeyFields},
}, backendSections()...)

// backendSections are the sections of the backends' own options: each
// backend's section as a field of store, and the fields of each section.
func backendSections() []docSection {
	var out []docSection
	for _, b := range backend.All() {
		if len(b.Sections) > 0 {
			out = append(out, docSection{"", "store.", []string{b.Name}})
		}
		for _, sec := range b.Sections {
			out = append(out, docSection{"", sec.Path + ".", sec.Fields})
		}
	}
	return out
}

// docRow matches the first cell of a row of docs/config.md's tables.
var docRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// Every field the decoder accepts has a row in docs/config.md, and every
// row is a field the decoder accepts.
func TestDocsListEveryField(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docRow.FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	known := map[string]bool{}
	for _, s := range docSections {
		for _, f := range s.fields {
			p := s.prefix + f
			known[p] = true
			if !documented[p] {
				t.Errorf("docs/config.md has no row for %s: add | `%s` | type | default | bounds or values | meaning |", p, p)
			}
		}
	}
	for p := range documented {
		if !known[p] {
			t.Errorf("docs/config.md documents %s, which the config file does not accept", p)
		}
	}
}

// Every call of fields passes a list that TestDocsListEveryField checks, so
// that a new section cannot escape the documentation: a named list, the
// store's (storeKeys: storeFields and the backends' names), or a backend's
// section (its Fields; package backend holds each call to its Sections).
func TestDocsCoverEveryFieldList(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := 0
	for _, name := range files {
		// descriptors.go reads envoyproxy/ratelimit's descriptor files,
		// another format, documented with the rate-limit service.
		if strings.HasSuffix(name, "_test.go") || name == "descriptors.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "fields" || len(call.Args) != 4 {
				return true
			}
			calls++
			covered := false
			switch a := call.Args[2].(type) {
			case *ast.Ident:
				covered = slices.ContainsFunc(docSections, func(s docSection) bool { return s.name == a.Name })
			case *ast.CallExpr:
				id, ok := a.Fun.(*ast.Ident)
				covered = ok && id.Name == "storeKeys"
			case *ast.SelectorExpr:
				covered = a.Sel.Name == "Fields" && name == "store.go"
			}
			if !covered {
				t.Errorf("%s: fields is passed a list that docSections does not map to docs/config.md: pass a package-level list and add it to docSections", fset.Position(call.Pos()))
			}
			return true
		})
	}
	named := 0
	for _, s := range docSections {
		if s.name != "" {
			named++
		}
	}
	if calls < named {
		t.Errorf("found %d calls of fields, want at least %d", calls, named)
	}
}

// Every example in docs/config.md is valid, completed with an upstream and
// a rule where it has none.
func TestDocsExamplesParse(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 8 {
		t.Fatalf("found %d yaml examples in docs/config.md, want one per section", len(blocks))
	}
	for _, m := range blocks {
		file := m[1]
		if !regexp.MustCompile("(?m)^upstream:").MatchString(file) {
			file += "upstream: builtin:echo\n"
		}
		if !regexp.MustCompile("(?m)^rules:").MatchString(file) {
			file += "rules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
		}
		if _, err := Parse([]byte(file), "docs/config.md"); err != nil {
			t.Errorf("example:\n%s\n%v", m[1], err)
		}
	}
}
