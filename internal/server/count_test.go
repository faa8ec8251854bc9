package server_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// TestGatewayCountsFailedLogins runs the login brute-force rule through the
// gateway in front of a real upstream that answers 401 to a wrong password
// and 200 to the right one: only the 401s count, per account and address,
// and the sixth attempt after five failures never reaches the upstream.
func TestGatewayCountsFailedLogins(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    httplimit.CountMode
		backend string
	}{
		{"after/memory", httplimit.CountAfter, "memory"},
		{"reserve/memory", httplimit.CountReserve, "memory"},
		{"reserve/redis", httplimit.CountReserve, "redis"},
		{"after/redis", httplimit.CountAfter, "redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				switch r.URL.Query().Get("password") {
				case "right":
					w.Write([]byte("welcome"))
				case "locked":
					// The application marks a failure it answers 200.
					w.Header().Set("Sluice-Count", "1")
					w.Write([]byte("try again"))
				default:
					w.WriteHeader(http.StatusUnauthorized)
				}
			}))
			defer up.Close()
			opts := server.Options{Upstream: up.URL, Backend: tc.backend, Limiter: httplimit.Options{Rules: []httplimit.Rule{{
				Name:  "login-failures",
				Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{"POST"}},
				Key:   []httplimit.KeyPart{httplimit.Query("user"), httplimit.IP()},
				Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: 15 * time.Minute},
				Count: &httplimit.CountOn{Statuses: []int{401}, Header: "Sluice-Count", Mode: tc.mode},
			}}}}
			if tc.backend == "redis" {
				// A Timeout a loaded machine cannot outrun: a take that timed
				// out would be decided by the local fallback while Redis
				// charged it anyway, and this test is about what counts.
				opts.Redis = redisstore.Options{URL: redistest.Start(t).URL(), Timeout: 5 * time.Second}
			}
			g := start(t, opts)
			login := func(user, password string) *http.Response {
				t.Helper()
				return get(t, "POST", g.url+"/login?user="+user+"&password="+password, nil)
			}
			for i := range 10 {
				if r := login("alice", "right"); r.StatusCode != 200 {
					t.Fatalf("success %d: status %d, want 200", i, r.StatusCode)
				}
			}
			for i := range 4 {
				if r := login("alice", "wrong"); r.StatusCode != 401 {
					t.Fatalf("failure %d: status %d, want 401", i, r.StatusCode)
				}
			}
			r := login("alice", "locked")
			if r.StatusCode != 200 {
				t.Fatalf("marked failure: status %d, want 200", r.StatusCode)
			}
			if v, ok := r.Header["Sluice-Count"]; ok {
				t.Fatalf("the client received Sluice-Count: %q", v)
			}
			before := hits.Load()
			if r := login("alice", "right"); r.StatusCode != 429 {
				t.Fatalf("after five failures: status %d, want 429", r.StatusCode)
			}
			if hits.Load() != before {
				t.Fatal("the rejected attempt reached the upstream")
			}
			if r := login("bob", "wrong"); r.StatusCode != 401 {
				t.Fatalf("another account: status %d, want 401", r.StatusCode)
			}
			for series, want := range map[string]string{
				`sluice_decisions_total{outcome="not_counted",rule="login-failures"}`: "10",
				`sluice_decisions_total{outcome="allowed",rule="login-failures"}`:     "6",
				`sluice_decisions_total{outcome="limited",rule="login-failures"}`:     "1",
				`sluice_requests_total{outcome="allowed"}`:                            "16",
			} {
				if got := metric(t, g.admin, series); got != want {
					t.Errorf("%s: got %q, want %q", series, got, want)
				}
			}
		})
	}
}
