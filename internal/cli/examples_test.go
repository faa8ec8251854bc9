package cli_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// exampleConfigs returns the Sluice config files under examples/, relative
// to it: every YAML file but Envoy's own configurations and the descriptor
// files of the rate-limit service (under ratelimit/).
func exampleConfigs(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("../../examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		rel, _ := filepath.Rel("../../examples", path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch {
		case strings.Contains(string(b), "\nstatic_resources:"): // Envoy's
		case filepath.Base(filepath.Dir(rel)) == "ratelimit": // descriptors
		default:
			files = append(files, rel)
		}
		return nil
	})
	if err != nil || len(files) < 12 {
		t.Fatalf("examples: %v %v", files, err)
	}
	return files
}

// listenAddress is a loopback listener address of an example (Redis's
// standard port aside): the test moves them to free ports.
var listenAddress = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// Every example config passes check-config as it is, and every example
// that runs the gateway serves a request through it with nothing else
// started: its upstream is built in (or the example says what to start;
// the Redis example gets a Redis of the test's own). The other examples
// (forward-auth, the rate-limit service) start and answer /healthz.
func TestExamplesRunAsTheySay(t *testing.T) {
	// A copy of examples/, so that the files a config names resolve as
	// they do in place, with the listeners moved to free ports.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../examples")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range exampleConfigs(t) {
		t.Run(rel, func(t *testing.T) {
			var out, errb bytes.Buffer
			if c := cli.Run(context.Background(), []string{"check-config", filepath.Join("../../examples", rel)}, &out, &errb); c != 0 || !strings.Contains(out.String(), ": OK (") {
				t.Fatalf("check-config: exit %d, stdout %q, stderr %q", c, out.String(), errb.String())
			}
			b, err := os.ReadFile(filepath.Join(dir, rel))
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if strings.Contains(s, "redis://127.0.0.1:6379") {
				s = strings.ReplaceAll(s, "redis://127.0.0.1:6379/0", redistest.Start(t).URL())
			}
			s = listenAddress.ReplaceAllString(s, "127.0.0.1:0")
			if !strings.HasPrefix(s, "server:") && !strings.Contains(s, "\nserver:") {
				s = "server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}\n" + s
			}
			path := filepath.Join(dir, rel)
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.Gateway() && !strings.HasSuffix(cfg.Server.Listen, ":0")) || (cfg.Server.Admin != "" && !strings.HasSuffix(cfg.Server.Admin, ":0")) {
				t.Fatalf("the test could not move the example's listeners to free ports: %q, %q", cfg.Server.Listen, cfg.Server.Admin)
			}
			gw, admin, stderr := clitest.Serve(t, path)
			if admin != "" {
				if code, body := get(t, admin+"/healthz", nil); code != 200 {
					t.Errorf("/healthz: %d %q; log: %s", code, body, stderr.String())
				}
			}
			if !cfg.Gateway() {
				return
			}
			// A request each example's rules let through, from an API key
			// no list names.
			code, body := get(t, gw+"/api/search", map[string]string{"X-API-Key": "k-example"})
			if code != 200 || !strings.Contains(body, `"path": "/api/search"`) {
				t.Errorf("GET /api/search through the gateway: %d %q, want 200 from the upstream; log: %s", code, body, stderr.String())
			}
		})
	}
}

func get(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
