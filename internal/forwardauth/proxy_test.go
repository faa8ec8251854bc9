package forwardauth_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/forwardauth"
	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/memstore"
)

// These tests run a real Caddy and a real nginx, each configured by its
// file in examples/ with only the addresses changed, between a client and
// an upstream, with Sluice's endpoint configured by the example's
// sluice.yaml. The example files use these addresses:
const (
	exampleProxy    = "127.0.0.1:8000"
	exampleSluice   = "127.0.0.1:8083"
	exampleUpstream = "127.0.0.1:3000"
)

// upstream is the API behind the proxy: it answers 200 and remembers the
// headers of the requests it saw.
type upstream struct {
	mu   sync.Mutex
	seen []http.Header
	srv  *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "upstream: %s %s\n", r.Method, r.URL.RequestURI())
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// startSluice serves the forward-auth endpoint that the config file at
// path describes, on a free loopback port, with a store on a fake clock
// (so no limit resets while the test runs, however slow the machine).
func startSluice(t *testing.T, path string) string {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.ForwardAuth == nil {
		t.Fatalf("%s has no server.forward_auth", path)
	}
	if cfg.Server.ForwardAuth.Listen != exampleSluice {
		t.Fatalf("%s: forward_auth.listen %q, want %q as in the proxy's example", path, cfg.Server.ForwardAuth.Listen, exampleSluice)
	}
	store := memstore.New(memstore.Options{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	t.Cleanup(func() { store.Close() })
	ip, err := clientip.New(cfg.ClientIP)
	if err != nil {
		t.Fatal(err)
	}
	lo := cfg.Limiter
	lo.Store, lo.ClientIP = store, ip
	lim, err := httplimit.New(lo)
	if err != nil {
		t.Fatal(err)
	}
	h, err := forwardauth.New(lim.Handler, forwardauth.Options{TrustedProxies: cfg.Server.ForwardAuth.TrustedProxies, OverLimitHeader: lo.OverLimitHeader})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// writeExample copies the example file with its addresses replaced.
func writeExample(t *testing.T, src, dst string, addrs map[string]string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range addrs {
		if !bytes.Contains(b, []byte(from)) {
			t.Fatalf("%s does not mention %s", src, from)
		}
		b = bytes.ReplaceAll(b, []byte(from), []byte(to))
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCaddy(t *testing.T) {
	caddy := proxytest.Need(t, "caddy")
	up := newUpstream(t)
	sluiceAddr := startSluice(t, "../../examples/caddy/sluice.yaml")
	dir := t.TempDir()
	proxy := proxytest.FreeAddr(t)
	file := filepath.Join(dir, "Caddyfile")
	writeExample(t, "../../examples/caddy/Caddyfile", file, map[string]string{
		exampleProxy: proxy, exampleSluice: sluiceAddr, exampleUpstream: up.srv.Listener.Addr().String(),
	})
	cmd := exec.Command(caddy, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	proxytest.Start(t, cmd, proxy)
	checkProxy(t, "http://"+proxy, up, true)
}

func TestNginx(t *testing.T) {
	nginx := proxytest.Need(t, "nginx", "/usr/sbin/nginx")
	up := newUpstream(t)
	sluiceAddr := startSluice(t, "../../examples/nginx/sluice.yaml")
	dir := t.TempDir()
	proxy := proxytest.FreeAddr(t)
	file := filepath.Join(dir, "nginx.conf")
	writeExample(t, "../../examples/nginx/nginx.conf", file, map[string]string{
		exampleProxy: proxy, exampleSluice: sluiceAddr, exampleUpstream: up.srv.Listener.Addr().String(),
	})
	cmd := exec.Command(nginx, "-p", dir, "-c", file, "-e", "stderr", "-g", "daemon off;")
	proxytest.Start(t, cmd, proxy)
	checkProxy(t, "http://"+proxy, up, false)
}

// checkProxy drives the examples' login rule (5 per minute per IP) through
// the proxy at base. fullBody says whether the proxy passes Sluice's 429
// body through (Caddy) or writes its own (nginx).
func checkProxy(t *testing.T, base string, up *upstream, fullBody bool) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	do := func(method, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, strings.NewReader("user=a&password=b"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	// Allowed requests reach the upstream, and their responses carry the
	// rate-limit headers that the proxy copied from Sluice's answer.
	for i := 1; i <= 5; i++ {
		resp, body := do("POST", "/login", map[string]string{"Sluice-Over-Limit": "forged"})
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "upstream: POST /login") {
			t.Fatalf("login %d: %d %q, want 200 from the upstream", i, resp.StatusCode, body)
		}
		want := map[string]string{
			"Ratelimit-Policy":      `"login";q=5;w=60`,
			"Ratelimit":             fmt.Sprintf(`"login";r=%d;t=60`, 5-i),
			"X-Ratelimit-Limit":     "5",
			"X-Ratelimit-Remaining": fmt.Sprint(5 - i),
		}
		for k, v := range want {
			if got := resp.Header.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("login %d: %s %q, want [%q]", i, k, got, v)
			}
		}
		if resp.Header.Get("X-Ratelimit-Reset") == "" {
			t.Errorf("login %d: no X-RateLimit-Reset", i)
		}
		if v := resp.Header.Values("Retry-After"); len(v) > 0 {
			t.Errorf("login %d: Retry-After %q on an allowed response", i, v)
		}
		h := up.last()
		if v := h.Values("Sluice-Over-Limit"); len(v) > 0 {
			t.Errorf("login %d: the upstream got the client's Sluice-Over-Limit %q", i, v)
		}
		for _, k := range []string{"Ratelimit", "X-Ratelimit-Limit"} {
			if v := h.Values(k); len(v) > 0 {
				t.Errorf("login %d: the upstream got %s %q", i, k, v)
			}
		}
	}
	n := up.count()

	// The sixth is refused at the proxy, with Sluice's headers.
	check429 := func(what string, resp *http.Response, body string) {
		t.Helper()
		if resp.StatusCode != 429 {
			t.Fatalf("%s: status %d %q, want 429", what, resp.StatusCode, body)
		}
		for k, v := range map[string]string{
			"Retry-After":           "60",
			"Ratelimit":             `"login";r=0;t=60`,
			"Ratelimit-Policy":      `"login";q=5;w=60`,
			"X-Ratelimit-Limit":     "5",
			"X-Ratelimit-Remaining": "0",
			"Content-Type":          "application/problem+json",
			"Cache-Control":         "no-store",
		} {
			if got := resp.Header.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s %q, want [%q]", what, k, got, v)
			}
		}
		if !strings.Contains(body, `"status":429`) || !strings.Contains(body, `"retry_after":60`) {
			t.Errorf("%s: body %q is not the problem", what, body)
		}
		if fullBody && !strings.Contains(body, `"violated-policies":["login"]`) {
			t.Errorf("%s: body %q does not name the rule", what, body)
		}
	}
	resp, body := do("POST", "/login", nil)
	check429("login 6", resp, body)

	// Forwarding headers sent by the client change nothing: the proxy
	// writes its own, and Sluice believes only the proxy.
	resp, body = do("POST", "/login", map[string]string{
		"X-Forwarded-For":    "1.2.3.4",
		"X-Real-Ip":          "1.2.3.5",
		"Forwarded":          "for=1.2.3.6",
		"X-Forwarded-Method": "GET",
		"X-Forwarded-Uri":    "/elsewhere",
		"X-Forwarded-Host":   "other.example",
	})
	check429("login with spoofed forwarding headers", resp, body)
	if got := up.count(); got != n {
		t.Errorf("the upstream saw %d refused requests", got-n)
	}

	// Other requests of the same client are not limited by the rule, and
	// still carry the headers of the rule closest to its limit.
	resp, body = do("GET", "/login", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "upstream: GET /login") {
		t.Fatalf("GET /login: %d %q, want 200 from the upstream", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Ratelimit-Policy"); !strings.HasPrefix(got, `"per-ip";q=600;w=60`) {
		t.Errorf("GET /login: RateLimit-Policy %q, want the per-ip rule's", got)
	}

	// A soft rule never blocks: past its limit, the proxy tells the
	// upstream in Sluice-Over-Limit, which the client cannot forge.
	for i := 1; i <= 31; i++ {
		resp, body := do("GET", "/api/search?q=x", map[string]string{"Sluice-Over-Limit": "forged"})
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "upstream: GET /api/search?q=x") {
			t.Fatalf("search %d: %d %q, want 200 from the upstream", i, resp.StatusCode, body)
		}
		want := []string(nil)
		if i == 31 {
			want = []string{"search"}
		}
		if got := up.last().Values("Sluice-Over-Limit"); !slices.Equal(got, want) {
			t.Fatalf("search %d: the upstream got Sluice-Over-Limit %q, want %q", i, got, want)
		}
	}
}
