package cli_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// TestServeReloadsConfigMapSwap serves a config file mounted as Kubernetes
// mounts a ConfigMap in a directory (sluice.yaml -> ..data/sluice.yaml,
// ..data -> the current version's directory) and replays the kubelet's
// update: a new version directory, and a new ..data link renamed over the
// old one. The new limit applies at the next check for changes.
func TestServeReloadsConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	config := func(limit int) string {
		return fmt.Sprintf("server: { listen: 127.0.0.1:0, admin: 127.0.0.1:0 }\nupstream: builtin:echo\n"+
			"rules:\n  - { name: r, match: { path: /* }, algorithm: fixed_window, limit: %d, period: 1h }\n", limit)
	}
	update := func(version string, limit int) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, version, "sluice.yaml"), []byte(config(limit)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	update("..2026_11_26_00_00_01.000000001", 1000)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.Symlink("..data/sluice.yaml", path); err != nil {
		t.Fatal(err)
	}
	poll := cli.PollByHand(t)
	gateway, _, stderr := clitest.Serve(t, path)
	policy := func() string {
		resp, err := http.Get(gateway + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Policy")
	}
	if got := policy(); got != `"r";q=1000;w=3600` {
		t.Fatalf("RateLimit-Policy %q, want the limit of 1000", got)
	}
	update("..2026_11_26_00_00_02.000000002", 2000)
	// The old version's directory is gone after an update, as the
	// kubelet removes it.
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_26_00_00_01.000000001")); err != nil {
		t.Fatal(err)
	}
	poll()
	if got := policy(); got != `"r";q=2000;w=3600` {
		t.Fatalf("after a check for changes, RateLimit-Policy %q, want the swapped ConfigMap's limit of 2000:\n%s", got, stderr)
	}
}
