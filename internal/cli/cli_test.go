package cli_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
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
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]net.Addr, 1)
	code := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		code <- cli.RunWithReady(ctx, []string{"serve", "--config", quickstart(t), "--log-format", "json"}, io.Discard, &stderr,
			func(l, a net.Addr) { addrs <- [2]net.Addr{l, a} })
	}()
	var a [2]net.Addr
	select {
	case a = <-addrs:
	case c := <-code:
		t.Fatalf("serve exited with %d: %s", c, stderr.String())
	}
	base := "http://" + a[0].String()
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
	m, err := http.Get("http://" + a[1].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(metrics), `sluice_decisions_total{outcome="limited",rule="login"} 1`) {
		t.Errorf("metrics lack the rejection:\n%s", metrics)
	}
	cancel() // as SIGTERM does
	if c := <-code; c != 0 {
		t.Errorf("serve exited with %d after shutdown: %s", c, stderr.String())
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("no shutdown log: %s", stderr.String())
	}
}

func TestCheckConfig(t *testing.T) {
	var out, errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"check-config", "../../examples/quickstart.yaml"}, &out, &errb); c != 0 || !strings.Contains(out.String(), "OK (6 rules") {
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
	for _, args := range [][]string{nil, {"nope"}, {"serve"}, {"check-config"}, {"serve", "--config", "x", "extra"}} {
		if c := cli.Run(context.Background(), args, io.Discard, io.Discard); c != 2 {
			t.Errorf("%v: exit %d, want 2", args, c)
		}
	}
}
