package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// quickstart returns examples/quickstart.yaml with both listeners on free
// ports.
func quickstart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "listen: 127.0.0.1:8080", "listen: 127.0.0.1:0", 1)
	s = strings.Replace(s, "admin: 127.0.0.1:9090", "admin: 127.0.0.1:0", 1)
	path := filepath.Join(t.TempDir(), "quickstart.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeQuickstart(t *testing.T) {
	srv := clitest.Start(t, quickstart(t), "--log-format", "json")
	base := srv.Gateway
	post := func() *http.Response {
		r, err := http.Post(base+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r
	}
	for i := range 5 {
		r := post()
		if r.StatusCode != 200 {
			t.Fatalf("login %d: status %d", i, r.StatusCode)
		}
		if i == 0 && (r.Header.Get("RateLimit-Policy") != `"login";q=5;w=60` || r.Header.Get("X-RateLimit-Remaining") != "4") {
			t.Errorf("first login headers: %v", r.Header)
		}
	}
	r := post()
	if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("sixth login: status %d, headers %v; want 429 with Retry-After and a problem document", r.StatusCode, r.Header)
	}
	// The echo upstream shows the request it saw; exempt /healthz has no limit headers.
	h, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(h.Body)
	h.Body.Close()
	if h.StatusCode != 200 || !strings.Contains(string(body), `"path": "/healthz"`) || h.Header.Get("RateLimit") != "" {
		t.Errorf("/healthz: %d %q %v", h.StatusCode, body, h.Header)
	}
	m, err := http.Get(srv.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(metrics), `sluice_decisions_total{outcome="limited",rule="login"} 1`) {
		t.Errorf("metrics lack the rejection:\n%s", metrics)
	}
	if c := srv.Stop(); c != 0 {
		t.Errorf("serve exited with %d after shutdown: %s", c, srv.Stderr.String())
	}
	stderr := srv.Stderr.String()
	if !strings.Contains(stderr, "shutting down") {
		t.Errorf("no shutdown log: %s", stderr)
	}
	// Durations are logged in seconds, as JSON numbers: the rejection's
	// retry_after (within the login rule's minute), the shutdown's timeout
	// (10 s by default).
	seen := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		for _, k := range []string{"retry_after", "timeout"} {
			if v, ok := m[k]; ok {
				f, isNum := v.(float64)
				if !isNum {
					t.Errorf("%s logged as %v, want a number of seconds: %s", k, v, line)
				}
				seen[k] = f
			}
		}
	}
	if r, ok := seen["retry_after"]; !ok || r <= 0 || r > 60 {
		t.Errorf("the rejection's retry_after: %v (logged: %v), want seconds within (0, 60]", r, ok)
	}
	if to, ok := seen["timeout"]; ok && to != 10 {
		t.Errorf("the shutdown's timeout: %v, want 10 (seconds)", to)
	}
	// The quickstart takes tiers from a header as sent: serve warns about
	// it at start, as check-config does.
	if !strings.Contains(stderr, `"level":"WARN","msg":"tiers come from header:X-Plan as sent`) {
		t.Errorf("no WARN line about tiers chosen by clients: %s", stderr)
	}
}

func TestCheckConfig(t *testing.T) {
	var out, errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"check-config", "../../examples/quickstart.yaml"}, &out, &errb); c != 0 || !strings.Contains(out.String(), "OK (gateway to builtin:echo, 6 rules, store memory)") {
		t.Errorf("quickstart: exit %d, %q %q", c, out.String(), errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("upstream: builtin:echo\nrules:\n  - name: x\n    algorithm: gcra\n    limit: 0\n    period: 1s\n"), 0o600)
	out.Reset()
	errb.Reset()
	if c := cli.Run(context.Background(), []string{"check-config", bad}, &out, &errb); c != 1 || !strings.Contains(errb.String(), "bad.yaml:5:12: rules[0].limit:") {
		t.Errorf("bad file: exit %d, stderr %q", c, errb.String())
	}
	// serve refuses the same file with the same message.
	errb.Reset()
	if c := cli.Run(context.Background(), []string{"serve", "--config", bad}, io.Discard, &errb); c != 1 || !strings.Contains(errb.String(), "bad.yaml:5:12: rules[0].limit:") {
		t.Errorf("serve with a bad file: exit %d, stderr %q", c, errb.String())
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errb bytes.Buffer
		if c := cli.Run(context.Background(), args, &out, &errb); c != 0 || !strings.HasPrefix(out.String(), "sluice ") || errb.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and \"sluice VERSION\"", args, c, out.String(), errb.String())
		}
	}
}

// The quickstart's export rule delays a request that comes before its turn
// and then lets it through: two exports sent together pass, one of them
// after waiting (up to a second) for its turn.
func TestQuickstartDelays(t *testing.T) {
	srv := clitest.Start(t, quickstart(t))
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			r, err := http.Get(srv.Gateway + "/api/export/report")
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			codes <- r.StatusCode
		}()
	}
	for range 2 {
		if c := <-codes; c != 200 {
			t.Errorf("export: status %d, want 200 (delayed, not rejected)", c)
		}
	}
	m, err := http.Get(srv.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	for _, want := range []string{
		`sluice_decisions_total{outcome="delayed",rule="export"} 1`,
		`sluice_requests_total{outcome="delayed"} 1`,
		"sluice_delay_seconds_count 1",
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics)
		}
	}
	if c := srv.Stop(); c != 0 {
		t.Errorf("serve exited with %d: %s", c, srv.Stderr.String())
	}
}

// check-config says what identifies a client for the admin API's
// per-client overrides when the file leaves it implied, and warns when
// that is a tier name rather than a client.
func TestCheckConfigSaysWhatIdentifiesAClient(t *testing.T) {
	const rules = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {premium: {limit: 2}}}]\n"
	const wrongKey = "warning: per-client overrides (admin API) are keyed by header:X-Plan, whose values are tier names, not clients: set tiers.client to what identifies a client, such as header:X-API-Key"
	dir := t.TempDir()
	pem, err := filepath.Abs("../../examples/jwt/demo-issuer.pem")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tiers string
		summary     string // in the OK line; "" for no mention of overrides
		warn        bool   // the warning about overrides keyed by tier names
	}{
		{"no tiers", "", "", false},
		{"tiers as sent, no client", "tiers: {from: header:X-Plan}\n", "per-client overrides keyed by header:X-Plan (tiers.from)", true},
		{"tiers as sent, a client", "tiers: {from: header:X-Plan, client: header:X-API-Key}\n", "", false},
		{"tiers looked up by key", "tiers: {from: header:X-API-Key, keys: {k1: premium}}\n", "per-client overrides keyed by header:X-Api-Key (tiers.from)", false},
		{"tiers from a token", "identity: {jwt: {keys: [" + pem + "], algorithms: [EdDSA], issuer: i, audience: a}}\ntiers: {from: jwt:plan}\n", "per-client overrides keyed by jwt:sub (the token's subject)", false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(tc.tiers+rules), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if c := cli.Run(context.Background(), []string{"check-config", path}, &out, &errb); c != 0 {
			t.Errorf("%s: exit %d, stderr %q", tc.name, c, errb.String())
			continue
		}
		if got := strings.Contains(out.String(), "per-client overrides"); tc.summary == "" && got || tc.summary != "" && !strings.Contains(out.String(), tc.summary) {
			t.Errorf("%s: stdout %q, want %q in the summary", tc.name, out.String(), tc.summary)
		}
		if got := strings.Contains(errb.String(), wrongKey); got != tc.warn {
			t.Errorf("%s: stderr %q; want the warning about overrides keyed by tier names: %v", tc.name, errb.String(), tc.warn)
		}
	}
}

// check-config warns when priority classes come from a header as sent,
// which a client could set to make itself critical, and not when they
// come from a verified token.
func TestCheckConfigWarnsOfPriorityFromAHeader(t *testing.T) {
	const rules = "upstream: builtin:echo\nrules: [{name: a, concurrency: adaptive}]\n"
	const warn = "warning: priority classes come from header:X-Priority as sent"
	pem, err := filepath.Abs("../../examples/jwt/demo-issuer.pem")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, priority string
		warn           bool
	}{
		{"a header", "priority: {from: header:X-Priority}\n", true},
		{"a token", "identity: {jwt: {keys: [" + pem + "], algorithms: [EdDSA], issuer: i, audience: a}}\npriority: {from: jwt:priority}\n", false},
		{"routes", "priority: {routes: [{match: {path: /pay}, class: critical}]}\n", false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(tc.priority+rules), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if c := cli.Run(context.Background(), []string{"check-config", path}, &out, &errb); c != 0 {
			t.Errorf("%s: exit %d, stderr %q", tc.name, c, errb.String())
			continue
		}
		if got := strings.Contains(errb.String(), warn); got != tc.warn {
			t.Errorf("%s: stderr %q; want the warning: %v", tc.name, errb.String(), tc.warn)
		}
	}
}
