package backend_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/server/backend"
	"github.com/sluicehq/sluice/redisstore"
)

// Each entry of the table keeps the promises its fields make: its own
// section is store.<Name> and comes first, Decode walks sections that it
// has, and an opened backend has the abilities the entry claims (Shared)
// and only those.
func TestTable(t *testing.T) {
	if _, ok := backend.Lookup(backend.Default); !ok {
		t.Fatalf("the default backend %q is not in the table", backend.Default)
	}
	if got, want := backend.Choices(), "memory or redis"; got != want {
		t.Errorf("Choices: got %q, want %q", got, want)
	}
	if through, names := backend.Sharing(); through != "Redis" || names != "redis" {
		t.Errorf("Sharing: got %q, %q; want Redis, redis", through, names)
	}
	// An address where nothing listens: the redis backend opens degraded.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	for _, b := range backend.All() {
		t.Run(b.Name, func(t *testing.T) {
			if b.Name == "" || b.Open == nil {
				t.Fatal("a backend needs a Name and Open")
			}
			if (b.Decode != nil) != (len(b.Sections) > 0) {
				t.Errorf("Decode set %v, with %d sections: want both or neither", b.Decode != nil, len(b.Sections))
			}
			for i, sec := range b.Sections {
				if i == 0 && sec.Path != "store."+b.Name || i > 0 && !strings.HasPrefix(sec.Path, "store."+b.Name+".") {
					t.Errorf("section %d is %s: want store.%s, then sections within it", i, sec.Path, b.Name)
				}
			}
			if b.Shared && b.Title == "" {
				t.Error("a shared backend needs a Title for messages")
			}
			o := open(t, b, backend.Settings{MaxKeys: 100, Redis: redisstore.Options{URL: "redis://" + dead, Timeout: 50 * time.Millisecond}})
			if o.Store() == nil {
				t.Fatal("Store returned nil")
			}
			if _, ok := o.(backend.Shared); ok != b.Shared {
				t.Errorf("opened, it is a backend.Shared: %v; the entry's Shared: %v", ok, b.Shared)
			}
		})
	}
}

// open opens b as the server does, closing it when the test ends.
func open(t *testing.T, b backend.Backend, s backend.Settings) backend.Opened {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	env := backend.Env{
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registry: prometheus.NewRegistry(),
		Failed:   func() {},
		Degraded: func(time.Time, bool) {},
		Go:       func(f func(context.Context)) { wg.Go(func() { f(ctx) }) },
	}
	o, err := b.Open(env, s)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return o
}

// Every call of Decoder.Fields in the backends' files passes a section
// that its backend lists in Sections, by its package-level name, and each
// listed section is walked: the config package's test holds
// docs/config.md to the Sections, and so to what the decoder accepts.
func TestSectionsAreWalked(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	passed, listed := map[string]bool{}, map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Fields" || len(n.Args) != 3 {
					return true
				}
				if id, ok := n.Args[1].(*ast.Ident); ok {
					passed[id.Name] = true
				} else {
					t.Errorf("%s: Fields is passed a section that is not a package-level variable", fset.Position(n.Pos()))
				}
			case *ast.KeyValueExpr:
				k, ok := n.Key.(*ast.Ident)
				if !ok || k.Name != "Sections" {
					return true
				}
				lit, ok := n.Value.(*ast.CompositeLit)
				if !ok {
					t.Errorf("%s: list Sections as a literal of package-level variables", fset.Position(n.Pos()))
					return true
				}
				for _, e := range lit.Elts {
					if id, ok := e.(*ast.Ident); ok {
						listed[id.Name] = true
					} else {
						t.Errorf("%s: list Sections as a literal of package-level variables", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
	}
	for name := range passed {
		if !listed[name] {
			t.Errorf("Fields walks %s, which no backend lists in Sections (and docs/config.md need not document)", name)
		}
	}
	for name := range listed {
		if !passed[name] {
			t.Errorf("a backend lists %s in Sections, but no Decode walks it", name)
		}
	}
	if len(passed) == 0 {
		t.Error("found no call of Fields")
	}
}
