package rls

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// TestEnvoyExamples reads every Envoy configuration of examples/envoy as a
// v3 bootstrap, with go-control-plane's types and validation: their field
// names, types and typed configs are Envoy's.
func TestEnvoyExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/envoy/envoy*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var b bootstrapv3.Bootstrap
		if err := protojson.Unmarshal(js, &b); err != nil {
			t.Fatalf("%s: not an Envoy bootstrap: %v", f, err)
		}
		if err := b.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestEnvoyLoginExample plays the calls examples/envoy/envoy-login.yaml
// makes Envoy send against examples/envoy/sluice.yaml: a check with
// hits_addend 0 before each login, and a charge when the response is done
// only for a failure. Successes cost nothing; the sixth login after five
// failures is refused before it goes, and blocked for a minute.
func TestEnvoyLoginExample(t *testing.T) {
	c, err := config.Load("../../examples/envoy/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	st := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { st.Close() })
	h := start(t, Options{Store: st, Rules: c.Service.Rules})
	login := func(ip string, status int) bool {
		t.Helper()
		req := request(hits(desc("remote_address", ip, "outcome", "failed"), 0))
		req.Domain = "login"
		if h.call(t, req).OverallCode != ok {
			return false // refused before the upstream
		}
		if status == 401 || status == 403 { // the stream-done call
			req := request(desc("remote_address", ip, "outcome", "failed"))
			req.Domain = "login"
			h.call(t, req) // fire and forget: Envoy ignores the answer
		}
		return true
	}
	for range 20 {
		if !login("203.0.113.5", 200) {
			t.Fatal("a successful login was counted")
		}
	}
	for i := range 5 {
		if !login("203.0.113.5", 401) {
			t.Fatalf("failure %d refused, want five to pass", i+1)
		}
	}
	if login("203.0.113.5", 200) {
		t.Fatal("the login after five failures went to the upstream")
	}
	// The refusal was an offence: blocked for a minute even once the
	// failures leave the window.
	clk.Advance(59 * time.Second)
	if login("203.0.113.5", 200) {
		t.Fatal("blocked client admitted before its block ended")
	}
	if !login("198.51.100.7", 401) {
		t.Fatal("another address was refused")
	}
	// The example's deny list refuses its addresses in every domain.
	req := request(hits(desc("remote_address", "192.0.2.9", "outcome", "failed"), 0))
	req.Domain = "login"
	if resp := h.call(t, req); resp.OverallCode != over || string(resp.RawBody) != DeniedBody {
		t.Fatalf("deny-listed address: got %v", resp)
	}
}

// TestEnvoyQuotaExample plays the calls examples/envoy/envoy-quota.yaml
// makes Envoy send against examples/envoy/sluice.yaml: each customer's
// monthly quota renews on the billing anchor its token carries, or on the
// 1st without one, and duration_until_reset says when.
func TestEnvoyQuotaExample(t *testing.T) {
	c, err := config.Load("../../examples/envoy/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, ny)
	clk := clock.NewFake(now)
	st := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { st.Close() })
	h := start(t, Options{Store: st, Rules: c.Service.Rules, Anchor: c.Service.Anchor})
	for _, tc := range []struct {
		customer, anchor string
		renews           time.Time
	}{
		{"alice", "", time.Date(2026, 4, 1, 0, 0, 0, 0, ny)},
		{"bob", "15T09:00", time.Date(2026, 4, 15, 9, 0, 0, 0, ny)},
		{"carol", "31T00:00", time.Date(2026, 3, 31, 0, 0, 0, 0, ny)},
	} {
		req := request(desc("customer", tc.customer))
		if tc.anchor != "" {
			req.Descriptors = append(req.Descriptors, desc("billing_anchor", tc.anchor))
		}
		req.Domain = "quota"
		resp := h.call(t, req)
		s := resp.Statuses[0]
		if resp.OverallCode != ok || s.CurrentLimit.RequestsPerUnit != 10000 || s.LimitRemaining != 9999 {
			t.Fatalf("%s: %v", tc.customer, resp)
		}
		if got, want := s.DurationUntilReset.AsDuration(), tc.renews.Sub(now); got != want {
			t.Errorf("%s: renews in %v, want %v (at %v)", tc.customer, got, want, tc.renews)
		}
	}
}
