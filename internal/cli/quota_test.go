package cli_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli/clitest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// sluice serve on Redis with store.redis.quota set in its YAML file: a
// global sync: lease rule leases from its first request (lease_rate 1,
// where the default of 50 would decide 25 requests one call each), in
// leases of 10 units (lease_fraction 10% of 100, where the default 5%
// makes them 5), each sized for a quarter of lease_ttl 1m and so capped by
// the fraction (with the default 1s, the first lease would be 2 units).
// 25 requests then take 3 calls, 22 decided locally, 5 units left unused.
func TestServeQuotaLeaseOptions(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}
upstream: builtin:echo
store:
  backend: redis
  redis:
    url: "%s"
    timeout: 5s
    quota: {lease_rate: 1, lease_fraction: 10%%, lease_ttl: 1m}
rules:
  - name: global
    key: global
    algorithm: gcra
    limit: 100
    period: 1h
    sync: lease
`, srv.URL())
	if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, admin, _ := clitest.Serve(t, filepath.Join(dir, "sluice.yaml"))
	for i := range 25 {
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200", i, resp.StatusCode)
		}
	}
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m bytes.Buffer
	io.Copy(&m, resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"sluice_quota_redis_calls_total 3",
		"sluice_quota_local_decisions_total 22",
		"sluice_quota_leased_unused 5",
	} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}
