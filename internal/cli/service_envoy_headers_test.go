package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// sluice serve's rate-limit service sends envoyproxy/ratelimit's headers
// under the names service.envoy_headers gives: the limit, the units
// remaining and the seconds until the reset.
func TestServeServiceEnvoyHeaders(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(`server: { admin: 127.0.0.1:0 }
service:
  grpc: 127.0.0.1:0
  descriptors: api.yaml
  headers: [envoy]
  envoy_headers: { limit: X-RateLimit-Limit, remaining: X-RateLimit-Remaining, reset: X-RateLimit-Reset }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := clitest.Start(t, cfg, "--log-format", "json").Listening()
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	// The reset is seconds from now to the hour's end: 1 to 3600.
	if len(got) != 3 || got["X-RateLimit-Limit"] != "5" || got["X-RateLimit-Remaining"] != "4" || len(got["X-RateLimit-Reset"]) > 4 || got["X-RateLimit-Reset"] == "" || got["X-RateLimit-Reset"] == "0" {
		t.Errorf("got headers %v, want X-RateLimit-Limit 5, X-RateLimit-Remaining 4 and X-RateLimit-Reset in seconds", got)
	}
}
