package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli/clitest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// sluice serve with a concurrency rule on Redis, from a YAML file: at most
// 2 requests per user in flight against a real upstream that blocks, the
// third answered 429 with qu="concurrent-requests", a slot back once a
// response ends, and the rate set on the same rule charged only for
// admitted requests.
func TestServeConcurrencyOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	started, release := make(chan struct{}, 16), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "exported")
	}))
	t.Cleanup(func() { close(release); up.Close() })
	dir := t.TempDir()
	cfg := fmt.Sprintf(`server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}
upstream: %s
store:
  backend: redis
  redis: {url: "%s", timeout: 5s}
rules:
  - name: exports
    match: { path: /export/* }
    key: [header:X-User]
    algorithm: token_bucket
    limit: 3
    period: 1h
    concurrency: 2
    lease: 1m
`, up.URL, srv.URL())
	if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ := clitest.Serve(t, filepath.Join(dir, "sluice.yaml"))
	type answer struct {
		code           int
		policy, remain string
	}
	send := func(user string) answer {
		req, _ := http.NewRequest("GET", base+"/export/report", nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{code: -1, policy: err.Error()}
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")}
	}
	waitStarted := func() {
		t.Helper()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream never got the request")
		}
	}
	done := make(chan answer, 4)
	for range 2 {
		go func() { done <- send("ann") }()
		waitStarted()
	}
	if a := send("ann"); a.code != 429 || a.policy != `"exports";q=2;qu="concurrent-requests"` {
		t.Fatalf("third in flight: got %+v, want 429 with the concurrency policy", a)
	}
	go func() { done <- send("bob") }() // another key has slots of its own
	waitStarted()
	release <- struct{}{}
	if a := <-done; a.code != 200 {
		t.Fatalf("a response: got %+v, want 200", a)
	}
	go func() { done <- send("ann") }() // the slot is back
	waitStarted()
	for range 3 {
		release <- struct{}{}
		if a := <-done; a.code != 200 {
			t.Fatalf("a response: got %+v, want 200", a)
		}
	}
	// ann was admitted 3 times, refused once (uncharged): her rate is spent.
	if a := send("ann"); a.code != 429 || a.policy != `"exports";q=3;w=3600` {
		t.Fatalf("rate spent: got %+v, want 429 with the rate policy", a)
	}
}
