package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// One file runs the gateway, the forward-auth endpoint and the rate-limit
// service (gRPC and HTTP) on one store; a change of a descriptor file
// reloads the service's rules and keeps their counters.
func TestServeEverythingFromOneFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rl"), 0o755); err != nil {
		t.Fatal(err)
	}
	desc := func(n int) {
		t.Helper()
		text := fmt.Sprintf("domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: hour, requests_per_unit: %d }\n", n)
		if err := os.WriteFile(filepath.Join(dir, "rl", "api.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	desc(2)
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(`server:
  listen: 127.0.0.1:0
  admin: 127.0.0.1:0
  forward_auth: { listen: 127.0.0.1:0, trusted_proxies: [127.0.0.1] }
upstream: builtin:echo
rules:
  - { name: login, match: { path: /login }, algorithm: fixed_window, limit: 1, period: 1h }
service:
  grpc: 127.0.0.1:0
  http: 127.0.0.1:0
  descriptors: rl
`), 0o600); err != nil {
		t.Fatal(err)
	}

	poll := cli.PollByHand(t)
	srv := clitest.Start(t, cfg, "--log-format", "json")
	logs := srv.Stderr
	addrs := srv.Listening()
	for _, k := range []string{"listen", "admin", "forward_auth", "grpc", "service_http"} {
		if addrs[k] == "" {
			t.Fatalf("no %s address in %v", k, addrs)
		}
	}

	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	// ask charges hits to client value; 0 checks without charging.
	ask := func(value string, hits uint64) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: value}},
				HitsAddend: wrapperspb.UInt64(hits),
			}},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if got := ask("a", 1); got != want {
			t.Fatalf("gRPC call %d: got %v, want %v", i+1, got, want)
		}
	}

	// The HTTP face of the same service and store: client "a" is over.
	resp, err := http.Post("http://"+addrs["service_http"]+"/json", "application/json",
		strings.NewReader(`{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("POST /json for an exhausted client: got %d, want 429", resp.StatusCode)
	}

	// Forward-auth applies the gateway's rules to the request a proxy
	// describes.
	fa := func() int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addrs["forward_auth"]+"/auth", nil)
		req.Header.Set("X-Forwarded-Method", "POST")
		req.Header.Set("X-Forwarded-Uri", "/login")
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := fa(), fa(); a != http.StatusOK || b != http.StatusTooManyRequests {
		t.Errorf("forward-auth: got %d then %d, want 200 then 429", a, b)
	}
	// The gateway keys its own clients apart from forward-auth's.
	if resp, err := http.Post("http://"+addrs["listen"]+"/login", "text/plain", nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("gateway: got %v, %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	// Raising the descriptor's limit reloads the service by itself; the
	// two requests "a" used still count.
	desc(5)
	poll()
	if got := ask("a", 0); got != ok {
		t.Fatalf("after a check for changes, a check of the client at 2 of the raised limit: got %v, want %v:\n%s", got, ok, logs.String())
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, over} {
		if got := ask("a", 1); got != want {
			t.Fatalf("after the reload, call %d: got %v, want %v (2 of 5 used before)", i+1, got, want)
		}
	}

	if c := srv.Stop(); c != 0 {
		t.Errorf("serve exited with %d:\n%s", c, logs.String())
	}
}

// A file with only a service section runs no gateway listener.
func TestServeServiceOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: second, requests_per_unit: 1 }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("server: { admin: 127.0.0.1:0 }\nservice: { grpc: 127.0.0.1:0, descriptors: api.yaml }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if c := cli.Run(context.Background(), []string{"check-config", cfg}, &out, io.Discard); c != 0 || !strings.Contains(out.String(), "rate-limit service with 1 domains, store memory") {
		t.Errorf("check-config: exit %d, %q", c, out.String())
	}
	srv := clitest.Start(t, cfg, "--log-format", "json")
	if srv.Gateway != "" {
		t.Errorf("a gateway listener runs at %s", srv.Gateway)
	}
	addrs := srv.Listening()
	if addrs["grpc"] == "" || addrs["listen"] != "" {
		t.Errorf("listeners: got %v, want grpc and no gateway", addrs)
	}
	if c := srv.Stop(); c != 0 {
		t.Errorf("serve exited with %d:\n%s", c, srv.Stderr.String())
	}
}
