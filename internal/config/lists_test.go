package config_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

const listsBase = "upstream: builtin:echo\n"

func TestListsProblems(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       []string // each a substring of one problem, in order
	}{
		{"unknown list", `lists: { a: { cidrs: [10.0.0.0/8] } }
deny: [b]
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s, allow: [a, c] }]`,
			[]string{`:3:8: deny[0]: unknown list "b" (the lists are a)`, `rules[0].allow[1]: unknown list "c"`}},
		{"no lists section", "deny: x\nrules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]", []string{"deny[0]: unknown list \"x\": the file has no lists section"}},
		{"empty lists", `lists: { a: { cidrs: [] }, b: { keys: [], key: header:K } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{"lists.a.cidrs: empty", "lists.b.keys: empty"}},
		{"bad cidrs", `lists: { a: { cidrs: [10.0.0.0/8, 10.0.0.0/33, 10.1.0.0/8, nope] } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`,
			[]string{`:2:35: lists.a.cidrs[1]: "10.0.0.0/33" is not a CIDR`, `lists.a.cidrs[2]: "10.1.0.0/8" has bits set beyond its /8; did you mean 10.0.0.0/8?`, `lists.a.cidrs[3]: "nope" is not an IP address or CIDR`}},
		{"inline and file", `lists: { a: { cidrs: [10.0.0.0/8], cidrs_file: a.txt } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{"lists.a.cidrs_file: a list takes one of cidrs, cidrs_file, keys and keys_file; this one also has cidrs"}},
		{"empty file names", `lists: { a: { cidrs_file: '' }, b: { keys_file: '', key: header:K } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`,
			[]string{":2:27: lists.a.cidrs_file: want the path of a file, got an empty string", ":2:49: lists.b.keys_file: want the path of a file, got an empty string"}},
		{"keys without key", `lists: { a: { keys: [k] }, b: { cidrs: ["::/0"], key: header:K }, c: { keys: [k], key: ip }, d: {} }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s, allow: [a] }]`,
			[]string{"lists.b.key: only for keys", "lists.c.key: want the request attribute", "lists.d: missing: want one of cidrs",
				`rules[0].allow[0]: list "a" has keys but no key: give it key`}},
		{"bad names", `lists: { "a b": { cidrs: [10.0.0.0/8] } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{`list name "a b"`}},
		{"exempt with allow", `lists: { a: { cidrs: [10.0.0.0/8] } }
rules: [{ name: r, action: exempt, allow: [a] }]`, []string{"rules[0].allow: an exempt rule takes no allow"}},
		{"bad key", `lists: { a: { keys: ["k\u0001"], key: header:K } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{"lists.a.keys[0]: key \"k\\x01\" has a control character"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantProblems(t, listsBase+tt.file, tt.want)
		})
	}
}

// wantProblems parses file and checks that its problems are want, in order:
// each a substring of one problem.
func wantProblems(t *testing.T, file string, want []string) {
	t.Helper()
	_, err := config.Parse([]byte(file), "c.yaml")
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a config error", err)
	}
	msg := err.Error()
	lines := strings.Split(msg, "\n")
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(lines), len(want), msg)
	}
	for i, w := range want {
		if i < len(lines) && !strings.Contains(lines[i], w) {
			t.Errorf("problem %d: got %q, want it to contain %q", i, lines[i], w)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestListFiles(t *testing.T) {
	dir := t.TempDir()
	var nets, keys strings.Builder
	nets.WriteString("# generated\n")
	keys.WriteString("# generated\n")
	for i := range 100_000 {
		fmt.Fprintf(&nets, "10.%d.%d.%d\n", i>>16, i>>8&255, i&255*2%256) // not all adjacent
		fmt.Fprintf(&keys, "partner-%d\n", i)
	}
	writeFile(t, filepath.Join(dir, "nets.txt"), nets.String())
	writeFile(t, filepath.Join(dir, "keys.txt"), keys.String())
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, listsBase+`lists:
  abusers: { cidrs_file: nets.txt }
  partners: { keys_file: keys.txt, key: header:X-API-Key }
deny: abusers
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s, allow: [partners] }]
`)
	c, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ListFiles(cfgPath); len(got) != 2 || got[0] != filepath.Join(dir, "nets.txt") || got[1] != filepath.Join(dir, "keys.txt") {
		t.Errorf("ListFiles = %q", got)
	}
	deny := c.Limiter.Deny
	if len(deny) != 1 || deny[0].Name != "abusers" || !deny[0].Addrs.Contains(netip.MustParseAddr("10.1.134.158")) || deny[0].Addrs.Contains(netip.MustParseAddr("10.0.0.1")) {
		t.Errorf("deny list wrong: %+v", deny)
	}
	allow := c.Limiter.Rules[0].Allow
	if len(allow) != 1 || !allow[0].Keys.Contains("partner-99999") || allow[0].Keys.Contains("partner-100000") {
		t.Errorf("allow list wrong: %+v", allow)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Api-Key", "partner-7")
	if v := r.Header.Get(allow[0].Key.Name); v != "partner-7" {
		t.Errorf("list key %v does not read the header", allow[0].Key)
	}

	// Bad lines are reported with the list file's name and line.
	writeFile(t, filepath.Join(dir, "nets.txt"), "10.0.0.0/8\n\n# c\n10.0.0.0/33\n::1 # fine\nfe80::1%eth0\n")
	writeFile(t, filepath.Join(dir, "keys.txt"), "# only comments\n\n")
	_, err = config.Load(cfgPath)
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	for _, w := range []string{
		filepath.Join(dir, "nets.txt") + `:4: lists.abusers.cidrs_file: "10.0.0.0/33" is not a CIDR`,
		filepath.Join(dir, "nets.txt") + `:6: lists.abusers.cidrs_file: "fe80::1%eth0" is not an IP address`,
		filepath.Join(dir, "keys.txt") + ": lists.partners.keys_file: the file lists nothing",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got:\n%v\nwant a line containing %q", err, w)
		}
	}
	os.Remove(filepath.Join(dir, "keys.txt"))
	if _, err = config.Load(cfgPath); err == nil || !strings.Contains(err.Error(), "lists.partners.keys_file") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}
