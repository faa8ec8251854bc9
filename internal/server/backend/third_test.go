package backend_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
	"github.com/sluicehq/sluice/internal/server/backend"
	"github.com/sluicehq/sluice/memstore"
)

// countingStore is a memory store that counts the calls made to it: the
// store of a third backend, which only this test knows.
type countingStore struct {
	s     *memstore.Store
	calls atomic.Int64
}

var _ sluice.Store = (*countingStore)(nil)

func (c *countingStore) Take(ctx context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.s.Take(ctx, p, key, n)
}

func (c *countingStore) Peek(ctx context.Context, p *sluice.Policy, key string) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.s.Peek(ctx, p, key)
}

func (c *countingStore) Reserve(ctx context.Context, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.s.Reserve(ctx, p, key, n, maxWait)
}

func (c *countingStore) Cancel(ctx context.Context, p *sluice.Policy, key string, n int64, at time.Time) error {
	c.calls.Add(1)
	return c.s.Cancel(ctx, p, key, n, at)
}

func (c *countingStore) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	c.calls.Add(1)
	return c.s.Reset(ctx, p, key)
}

// countingOpened is the open counting backend.
type countingOpened struct{ c *countingStore }

func (o countingOpened) Store() sluice.Store         { return o.c }
func (o countingOpened) Ready(context.Context) error { return nil }
func (o countingOpened) Close() error                { return o.c.s.Close() }

// countingOptions are store.counting's.
type countingOptions struct{ Label string }

var countingSection = backend.Section{Path: "store.counting", Fields: []string{"label"}}

// counting returns the third backend, "counting", whose every open store
// is sent to opened with the options it was opened with. It has a section
// of options (store.counting.label) and runs periods of whole seconds
// only.
func counting(opened chan<- *countingStore, options chan<- any) backend.Backend {
	return backend.Backend{
		Name:     "counting",
		Sections: []backend.Section{countingSection},
		Decode: func(d backend.Decoder, n *yaml.Node, s *backend.Settings) {
			var o countingOptions
			d.Fields(n, countingSection, func(key string, v *yaml.Node) {
				if l, ok := d.String(v, "store.counting."+key); ok {
					o.Label = l
				}
			})
			s.Options = o
		},
		CheckLimit: func(l sluice.Limit) error {
			if l.Period%time.Second != 0 {
				return fmt.Errorf("counting: period %v is not a whole number of seconds", l.Period)
			}
			return nil
		},
		Open: func(env backend.Env, s backend.Settings) (backend.Opened, error) {
			c := &countingStore{s: memstore.New(memstore.Options{MaxKeys: s.MaxKeys, Clock: env.Clock})}
			opened <- c
			options <- s.Options
			return countingOpened{c}, nil
		},
	}
}

// A backend added to the table alone, in a file of its own, is chosen by
// store.backend, decoded and checked by check-config at its lines, and
// runs sluice serve: the gateway limits requests with its store.
func TestThirdBackend(t *testing.T) {
	opened, options := make(chan *countingStore, 1), make(chan any, 1)
	backend.Register(t, counting(opened, options))
	dir := t.TempDir()
	write := func(text string) string {
		t.Helper()
		path := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const rules = "rules: [{name: per-ip, key: [ip], algorithm: fixed_window, limit: 2, period: 1m}]\n"
	const head = "server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}\nupstream: builtin:echo\n"

	for _, tc := range []struct{ name, file, want string }{
		{"unknown backend", head + "store: {backend: nope}\n" + rules,
			`sluice.yaml:3:18: store.backend: want memory, redis or counting, got "nope"`},
		{"option", head + "store: {backend: counting, counting: {label: [a]}}\n" + rules,
			"sluice.yaml:3:46: store.counting.label: want a string, got a list"},
		{"unknown option", head + "store: {backend: counting, counting: {lable: a}}\n" + rules,
			`sluice.yaml:3:39: store.counting.lable: unknown field (did you mean "label"?)`},
		{"section of another backend", head + "store: {counting: {label: a}}\n" + rules,
			"sluice.yaml:3:19: store.counting: only for backend counting; the backend is memory"},
		{"limit it cannot run", head + "store: {backend: counting}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1500ms}]\n",
			"sluice.yaml:4:54: rules[0].period: counting: period 1.5s is not a whole number of seconds"},
		{"fleet on an unshared store", head + "store: {backend: counting}\nrules: [{name: a, concurrency: adaptive, adaptive: {fleet: 10}, lease: 1m}]\n",
			"sluice.yaml:4:60: rules[0].adaptive.fleet: a fleet limit is shared by the gateways through Redis (store.backend: redis); with the counting store there is one gateway, whose own limit is the rule's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(tc.file)
			var stdout, stderr bytes.Buffer
			if code := cli.Run(context.Background(), []string{"check-config", path}, &stdout, &stderr); code != 1 {
				t.Fatalf("check-config exited with %d, want 1; stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
			if got, want := stderr.String(), strings.ReplaceAll(tc.want, "sluice.yaml", path)+"\n"; got != want {
				t.Errorf("check-config said\n%s\nwant\n%s", got, want)
			}
		})
	}

	path := write(head + "store:\n  backend: counting\n  counting: {label: edge}\n" + rules)
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"check-config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("check-config exited with %d: %s", code, stderr.String())
	}
	if want := path + ": OK (gateway to builtin:echo, 1 rules, store counting)\n"; stdout.String() != want {
		t.Errorf("check-config said %q, want %q", stdout.String(), want)
	}

	gateway, admin, _ := clitest.Serve(t, path)
	var store *countingStore
	select {
	case store = <-opened:
	default:
		t.Fatal("serve did not open the counting backend")
	}
	if got, want := <-options, any(countingOptions{Label: "edge"}); got != want {
		t.Errorf("the backend was opened with options %#v, want %#v", got, want)
	}
	for i, want := range []int{200, 200, 429} {
		resp, err := http.Get(gateway + "/anything")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: got %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if got := store.calls.Load(); got != 3 {
		t.Errorf("the counting store was called %d times, want 3 (one decision per request)", got)
	}
	if got := get(t, admin+"/readyz"); got != "ready\n" {
		t.Errorf("/readyz: got %q, want ready", got)
	}
	metrics := get(t, admin+"/metrics")
	for _, want := range []string{`sluice_store_errors_total{backend="counting"} 0`, `sluice_decisions_total{`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
