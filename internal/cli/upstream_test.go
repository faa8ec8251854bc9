package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// The upstream mapping and the server's timeouts in a config file reach the
// gateway: an upstream slower than response_header_timeout gets the client
// a 504, and host: upstream sends the upstream's own Host.
func TestServeUpstreamSettings(t *testing.T) {
	release := make(chan struct{})
	hosts := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		if r.URL.Path == "/slow" {
			<-release
		}
	}))
	defer up.Close()
	defer close(release)
	cfg := fmt.Sprintf(`server: { listen: 127.0.0.1:0, admin: off, read_timeout: 5s, idle_timeout: 30s }
upstream:
  url: %s
  response_header_timeout: 200ms
  host: upstream
rules: [{name: a, algorithm: gcra, limit: 100, period: 1s}]
`, up.URL)
	path := filepath.Join(t.TempDir(), "upstream.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := clitest.Start(t, path)
	base := srv.Gateway
	for _, tc := range []struct {
		path string
		want int
	}{{"/fast", 200}, {"/slow", 504}} {
		r, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.path, r.StatusCode, tc.want)
		}
		if h := <-hosts; h != up.Listener.Addr().String() {
			t.Errorf("%s: upstream Host %q, want its own %q (host: upstream)", tc.path, h, up.Listener.Addr())
		}
	}
	srv.Stop()
}
