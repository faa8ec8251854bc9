package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// The rate-limit service of sluice serve, over gRPC: a deny-listed address
// is OVER_LIMIT with the problem body, a partner's key is never limited,
// a changed list file applies without a restart, and sluice descriptor
// show prints a penalty's block.
func TestServeServiceLists(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokenFile := filepath.Join(dir, "admin-token")
	write("admin-token", "a-token-of-thirty-two-characters\n")
	write("deny.txt", "203.0.113.0/24\n")
	write("partners.txt", "k-partner\n")
	write("api.yaml", `domain: api
descriptors:
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: api_key
    rate_limit: { unit: hour, requests_per_unit: 1, penalty: { blocks: [1h], forget: 24h } }
`)
	cfg := filepath.Join(dir, "sluice.yaml")
	write("sluice.yaml", `server: { admin: 127.0.0.1:0 }
admin: { api: true, token_file: admin-token }
lists:
  abusers: { cidrs_file: deny.txt }
  partners: { keys_file: partners.txt }
service:
  grpc: 127.0.0.1:0
  descriptors: api.yaml
  deny: { remote_address: abusers }
  allow: { api_key: partners }
`)
	poll := cli.PollByHand(t)
	srv := clitest.Start(t, cfg, "--log-format", "json")
	addrs := srv.Listening()
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(key, value string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const over = rlsv3.RateLimitResponse_OVER_LIMIT
	for range 2 {
		if resp := ask("remote_address", "203.0.113.9"); resp.OverallCode != over || !strings.Contains(string(resp.RawBody), "not allowed") {
			t.Fatalf("deny-listed address: %v", resp)
		}
	}
	for range 3 {
		if resp := ask("api_key", "k-partner"); resp.OverallCode == over {
			t.Fatal("a partner's key was limited")
		}
	}
	if ask("remote_address", "198.51.100.2").OverallCode == over {
		t.Fatal("198.51.100.2's first request was refused")
	}
	// The list file changes: 198.51.100.2 is refused, 203.0.113.9 is not.
	write("deny.txt", "198.51.100.2\n")
	poll()
	if resp := ask("remote_address", "198.51.100.2"); !strings.Contains(string(resp.RawBody), "not allowed") {
		t.Fatalf("after a check for changes, an address the changed deny list names: %v, want refused as not allowed: %s", resp, srv.Stderr.String())
	}
	if ask("remote_address", "203.0.113.9").OverallCode == over {
		t.Error("an address no longer deny-listed was refused")
	}
	show := func(descriptor string) string {
		t.Helper()
		var out, errb strings.Builder
		if c := cli.Run(context.Background(), []string{"descriptor", "show", "api", descriptor, "--admin", "http://" + addrs["admin"], "--token-file", tokenFile}, &out, &errb); c != 0 {
			t.Fatalf("descriptor show %s: exit %d, %q", descriptor, c, errb.String())
		}
		return out.String()
	}
	if out := show("remote_address=198.51.100.2"); !strings.Contains(out, "deny list abusers") {
		t.Errorf("descriptor show of a deny-listed address: %q", out)
	}
	if out := show("api_key=k-partner"); !strings.Contains(out, "allow list partners") {
		t.Errorf("descriptor show of a partner's key: %q", out)
	}
	// A key over its limit is blocked for an hour; descriptor show says so.
	ask("api_key", "k-other")
	ask("api_key", "k-other")
	if out := show("api_key=k-other"); !regexp.MustCompile(`blocked by the rule's penalty for (1h0m0s|59m[0-9.]+s) more`).MatchString(out) {
		t.Errorf("descriptor show of a blocked key: %q", out)
	}
}
