package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// The descriptor commands look at, reset and override a descriptor of a
// running rate-limit service.
func TestDescriptorCommands(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte("a-token-of-thirty-two-characters\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n"), 0o600)
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte("server: { admin: 127.0.0.1:0 }\nadmin: { api: true, token_file: admin-token }\nservice: { grpc: 127.0.0.1:0, descriptors: api.yaml }\n"), 0o600)
	addrs := clitest.Start(t, cfg, "--log-format", "json").Listening()
	admin := "http://" + addrs["admin"]
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(value string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		args = append(args, "--admin", admin, "--token-file", tokenFile)
		if c := cli.Run(context.Background(), args, &out, &errb); c != wantCode {
			t.Fatalf("sluice %s: exit %d, want %d; stdout %q, stderr %q", strings.Join(args, " "), c, wantCode, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}

	ask("a/b")
	ask("a/b")
	if out := run(0, "descriptor", "show", "api", "client=a/b"); !regexpLine(out, "api.client", "a/b", "3/1h0m0s", "fixed_window", "2", "1", "true") {
		t.Errorf("descriptor show: %q", out)
	}
	if out := run(0, "descriptor", "reset", "api", "client=a/b"); !strings.Contains(out, `reset api/client key "a/b"`) {
		t.Errorf("descriptor reset: %q", out)
	}
	if out := run(0, "descriptor", "show", "api", "client=a/b"); !regexpLine(out, "api.client", "a/b", "3/1h0m0s", "fixed_window", "0", "3", "true") {
		t.Errorf("descriptor show after reset: %q", out)
	}
	// A value with / and = in it names one descriptor through the ID.
	if out := run(0, "descriptor", "set-limit", "api", "client=a/b", "--limit", "1", "--period", "1m", "--until", "2999-01-01T00:00:00Z"); !regexpLine(out, "api/client=a%2Fb", "1/1m", "fixed_window", "2999-01-01T00:00:00Z") {
		t.Errorf("descriptor set-limit: %q", out)
	}
	if a, b := ask("a/b"), ask("a/b"); a != rlsv3.RateLimitResponse_OK || b != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("under the override of 1 a minute: %v then %v, want OK then OVER_LIMIT", a, b)
	}
	if out := run(0, "descriptor", "show", "api", "client=a/b"); !regexpLine(out, "override", "api/client=a%2Fb", "1/1m0s", "fixed_window", "1", "0", "false") {
		t.Errorf("descriptor show under the override: %q", out)
	}
	if out := run(0, "descriptor", "list"); !strings.Contains(out, "api/client=a%2Fb") {
		t.Errorf("descriptor list: %q", out)
	}
	if out := run(0, "descriptor", "remove", "api", "client=a/b"); !strings.Contains(out, "removed the override of api/client=a%2Fb") {
		t.Errorf("descriptor remove: %q", out)
	}
	if out := run(0, "descriptor", "list"); !strings.Contains(out, "no descriptor overrides") {
		t.Errorf("descriptor list after remove: %q", out)
	}
	if out := run(1, "descriptor", "remove", "api", "client=a/b"); !strings.Contains(out, "HTTP 404") {
		t.Errorf("remove twice: %q", out)
	}
	if out := run(1, "descriptor", "show", "nope", "client=a"); !strings.Contains(out, `unknown domain "nope" (HTTP 404)`) {
		t.Errorf("unknown domain: %q", out)
	}
	if out := run(2, "descriptor", "show", "api", "client"); !strings.Contains(out, `entry "client": want KEY=VALUE`) {
		t.Errorf("an entry without =: %q", out)
	}
	if out := run(2, "descriptor", "set-limit", "api", "client=a"); !strings.Contains(out, "--limit N --period DURATION") {
		t.Errorf("set-limit without a limit: %q", out)
	}
}
