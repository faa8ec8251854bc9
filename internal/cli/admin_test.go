package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

const adminConfig = `server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}
upstream: builtin:echo
admin: {api: true, token_file: admin-token}
tiers:
  from: header:X-API-Key
  keys: {k-gold: premium}
rules:
  - name: login
    match: {path: /login}
    algorithm: fixed_window
    limit: 5
    period: 1h
  - name: api
    match: {path: /api}
    key: [header:X-API-Key]
    algorithm: fixed_window
    limit: 2
    period: 1h
    tiers: {premium: {limit: 4}}
  - name: preview
    match: {path: /preview}
    algorithm: fixed_window
    limit: 5
    period: 1h
    enforce: 0%
  - name: exports
    match: {path: /export}
    key: [header:X-API-Key]
    concurrency: 2
    lease: 1m
`

// serveAdmin runs `sluice serve` with the admin API on and returns the
// gateway's URL, the admin URL and the token file.
func serveAdmin(t *testing.T) (string, string, string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte("a-token-of-thirty-two-characters\n"), 0o600)
	path := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(path, []byte(adminConfig), 0o600)
	gw, admin, _ := clitest.Serve(t, path)
	return gw, admin, tokenFile
}

func TestClientAndKeyCommands(t *testing.T) {
	gw, admin, tok := serveAdmin(t)
	run := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		args = append(args, "--admin", admin, "--token-file", tok)
		if c := cli.Run(context.Background(), args, &out, &errb); c != wantCode {
			t.Fatalf("sluice %s: exit %d, want %d; stdout %q, stderr %q", strings.Join(args, " "), c, wantCode, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	count := func(path, key string, n int) int {
		ok := 0
		for range n {
			req, _ := http.NewRequest("GET", gw+path, nil)
			req.Header.Set("X-API-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ok++
			}
		}
		return ok
	}

	if out := run(0, "client", "list"); !strings.Contains(out, "no overrides") {
		t.Errorf("client list with none: %q", out)
	}
	if out := run(0, "client", "set-tier", "k/1", "premium", "--until", "2999-12-31T00:00:00Z"); !strings.Contains(out, "premium") || !strings.Contains(out, "2999-12-31") {
		t.Errorf("set-tier: %q", out)
	}
	if n := count("/api", "k/1", 6); n != 4 {
		t.Errorf("client set to premium by the command: %d allowed, want 4", n)
	}
	if out := run(0, "client", "set-limit", "k-2", "--rule", "api", "--limit", "3", "--period", "1h"); !strings.Contains(out, "api=3/1h fixed_window") {
		t.Errorf("set-limit: %q", out)
	}
	if n := count("/api", "k-2", 6); n != 3 {
		t.Errorf("client with its own limit: %d allowed, want 3", n)
	}
	// A monthly quota of the client's own, renewed at its anchor.
	if out := run(0, "client", "set-limit", "k-3", "--rule", "api", "--limit", "3", "--period", "month", "--timezone", "Europe/Berlin"); !strings.Contains(out, "api=3/month fixed_window") {
		t.Errorf("set-limit monthly: %q", out)
	}
	if out := run(0, "client", "set-anchor", "k-3", "15T09:00"); !regexpLine(out, "k-3", "api=3/month", "15T09:00") {
		t.Errorf("set-anchor: %q", out)
	}
	if n := count("/api", "k-3", 5); n != 3 {
		t.Errorf("client with its own monthly quota: %d allowed, want 3", n)
	}
	if out := run(0, "key", "show", "--rule", "api", "--client", "k-3", "k-3"); !strings.Contains(out, "PERIOD") || !regexpLine(out, "api", "override", "3/month", "3", "0", "09:00", "to", "09:00") {
		t.Errorf("key show of a monthly quota: %q", out)
	}
	out := run(0, "client", "list")
	if !strings.Contains(out, "k/1") || !strings.Contains(out, "k-2") {
		t.Errorf("client list: %q", out)
	}
	run(0, "client", "remove", "k/1")
	if out := run(1, "client", "show", "k/1"); !strings.Contains(out, "has no override (HTTP 404)") {
		t.Errorf("show after remove: %q", out)
	}

	count("/login", "", 2)
	if out := run(0, "key", "show", "--rule", "login", "127.0.0.1"); !regexpLine(out, "login", "5/1h0m0s", "2", "3") {
		t.Errorf("key show: %q", out)
	}
	if out := run(0, "key", "reset", "--rule", "login", "127.0.0.1"); !strings.Contains(out, "reset in login") {
		t.Errorf("key reset: %q", out)
	}
	if out := run(0, "key", "show", "127.0.0.1", "--rule", "login"); !regexpLine(out, "login", "5/1h0m0s", "0", "5") {
		t.Errorf("key show after reset: %q", out)
	}
	if out := run(0, "key", "show", "--rule", "preview", "127.0.0.1"); !strings.Contains(out, "preview (shadow)") {
		t.Errorf("key show of a key in shadow mode: %q", out)
	}
	// A concurrency rule's slots: none in use, both free.
	if out := run(0, "key", "show", "--rule", "exports", "k-x"); !regexpLine(out, "exports", "(slots)", "2", "in", "flight,", "lease", "1m0s", "0", "2") {
		t.Errorf("key show of a concurrency rule: %q", out)
	}
	if out := run(0, "key", "reset", "--rule", "exports", "k-x"); !strings.Contains(out, "reset in exports") {
		t.Errorf("key reset of a concurrency rule: %q", out)
	}
	if out := run(1, "key", "show", "--rule", "nope", "x"); !strings.Contains(out, `no rule is named "nope"`) {
		t.Errorf("unknown rule: %q", out)
	}
	if out := run(1, "client", "set-tier", "k", "gold"); !strings.Contains(out, `unknown tier "gold"`) {
		t.Errorf("unknown tier: %q", out)
	}
	if out := run(2, "client", "set-limit", "k", "--rule", "api"); !strings.Contains(out, "want CLIENT --rule RULE --limit N --period DURATION") {
		t.Errorf("set-limit without a limit: %q", out)
	}
	// A wrong token is refused.
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("not-the-token-at-all"), 0o600)
	var errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"client", "list", "--admin", admin, "--token-file", bad}, io.Discard, &errb); c != 1 || !strings.Contains(errb.String(), "HTTP 401") {
		t.Errorf("wrong token: exit %d, %q", c, errb.String())
	}
}

// regexpLine reports whether some line of out holds every field, in order.
func regexpLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		i := 0
		for _, w := range f {
			if i < len(fields) && w == fields[i] {
				i++
			}
		}
		if i == len(fields) {
			return true
		}
	}
	return false
}

func TestCheckConfigReadsTheAdminToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(path, []byte(adminConfig), 0o600)
	var errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"check-config", path}, io.Discard, &errb); c != 1 || !strings.Contains(errb.String(), "admin.token_file") {
		t.Errorf("check-config without the token file: exit %d, %q", c, errb.String())
	}
	errb.Reset()
	if c := cli.Run(context.Background(), []string{"serve", "--config", path}, io.Discard, &errb); c != 1 || !strings.Contains(errb.String(), "admin.token_file") {
		t.Errorf("serve without the token file: exit %d, %q", c, errb.String())
	}
	os.WriteFile(filepath.Join(dir, "admin-token"), []byte("a-token-of-thirty-two-characters\n"), 0o600)
	if c := cli.Run(context.Background(), []string{"check-config", path}, io.Discard, io.Discard); c != 0 {
		t.Errorf("check-config with the token file: exit %d", c)
	}
}

// A new token in the token file applies by itself, as a change of the
// config file does.
func TestAdminTokenRotates(t *testing.T) {
	poll := cli.PollByHand(t)
	_, admin, tok := serveAdmin(t)
	list := func() (int, string) {
		var errb bytes.Buffer
		c := cli.Run(context.Background(), []string{"client", "list", "--admin", admin, "--token-file", tok}, io.Discard, &errb)
		return c, errb.String()
	}
	if c, errs := list(); c != 0 {
		t.Fatalf("with the first token: exit %d, %s", c, errs)
	}
	old := filepath.Join(t.TempDir(), "old-token")
	b, _ := os.ReadFile(tok)
	os.WriteFile(old, b, 0o600)
	os.WriteFile(tok, []byte("the-second-token-of-thirty-two-c\n"), 0o600)
	poll()
	if c, errs := list(); c != 0 {
		t.Fatalf("after a check for changes, the new token: exit %d, %s; want it accepted", c, errs)
	}
	var errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"client", "list", "--admin", admin, "--token-file", old}, io.Discard, &errb); c != 1 || !strings.Contains(errb.String(), "HTTP 401") {
		t.Errorf("the old token after rotation: exit %d, %q; want 401", c, errb.String())
	}
}

// A billing anchor applies to calendar quotas alone: on a configuration
// without any, set-anchor sets it and says, on stderr, that it has no
// effect; once the client has a calendar quota of its own, it says nothing.
func TestSetAnchorWithoutCalendarQuotas(t *testing.T) {
	_, admin, tok := serveAdmin(t)
	run := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if c := cli.Run(context.Background(), append(args, "--admin", admin, "--token-file", tok), &out, &errb); c != 0 {
			t.Fatalf("sluice %s: exit %d, stderr %q", strings.Join(args, " "), c, errb.String())
		}
		return out.String(), errb.String()
	}
	out, warn := run("client", "set-anchor", "k-a", "15T09:00")
	if !regexpLine(out, "k-a", "15T09:00") {
		t.Errorf("set-anchor: stdout %q, want the override with its anchor", out)
	}
	if want := "warning: the anchor 15T09:00 has no effect: no rule has a calendar quota (period day, week, month or year), nor has the client's own limits\n"; warn != want {
		t.Errorf("set-anchor without calendar quotas: stderr %q, want %q", warn, want)
	}
	run("client", "set-limit", "k-a", "--rule", "api", "--limit", "3", "--period", "month")
	if _, warn := run("client", "set-anchor", "k-a", "01T00:00"); warn != "" {
		t.Errorf("set-anchor with a calendar quota of the client's own: stderr %q, want nothing", warn)
	}
	// A change that sets no anchor says nothing of the one in force.
	run("client", "set-anchor", "k-b", "15T09:00")
	if _, warn := run("client", "set-tier", "k-b", "premium"); warn != "" {
		t.Errorf("set-tier of a client with an anchor: stderr %q, want nothing", warn)
	}
}
