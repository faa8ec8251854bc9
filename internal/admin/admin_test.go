package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/memstore"
)

// FuzzAPI sends arbitrary bodies to every route: the API answers each
// with a JSON document and a status below 500 (a memory store never
// fails), and never panics.
func FuzzAPI(f *testing.F) {
	store := memstore.New(memstore.Options{})
	f.Cleanup(func() { store.Close() })
	set, err := overrides.NewClients(overrides.Options{Store: store})
	if err != nil {
		f.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Options{Store: store, Overrides: set,
		Tiers: httplimit.Tiers{From: httplimit.Header("X-API-Key")},
		Rules: []httplimit.Rule{
			{Name: "login", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute}},
			{Name: "api", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key"), httplimit.Global()},
				Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Minute},
				Tiers: map[string]sluice.Limit{"premium": {Algorithm: sluice.GCRA, Count: 50, Period: time.Minute}}},
			{Name: "slow", Action: httplimit.Delay, MaxDelay: time.Second, Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Minute}},
		}})
	if err != nil {
		f.Fatal(err)
	}
	tree, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
		{Key: "client", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 3, Unit: descriptor.Hour}},
		{Key: "health"},
	}})
	if err != nil {
		f.Fatal(err)
	}
	dset, err := overrides.NewDescriptors(overrides.Options{Store: store})
	if err != nil {
		f.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Store: store, Rules: tree, Overrides: dset})
	if err != nil {
		f.Fatal(err)
	}
	const token = "fuzz-token-fuzz-token"
	h := admin.Handler(admin.Options{State: func() admin.State { return admin.State{Limiter: lim, Service: svc, Token: []byte(token)} },
		Overrides: set, Descriptors: dset})
	for _, seed := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/keys/show", `{"rule":"login","key":["203.0.113.9"]}`},
		{"POST", "/admin/v1/keys/show", `{"key":["k"],"client":"k"}`},
		{"POST", "/admin/v1/keys/reset", `{"request":{"method":"POST","path":"/x?y=1","headers":{"X-API-Key":"k"},"remote_addr":"[2001:db8::1]:5"}}`},
		{"PUT", "/admin/v1/clients/k", `{"tier":"premium","until":"2999-01-01T00:00:00Z"}`},
		{"PATCH", "/admin/v1/clients/k", `{"limits":{"api":{"limit":9,"period":"1m","burst":3},"slow":{"algorithm":"fixed_window","limit":1,"period":"1s"}}}`},
		{"PATCH", "/admin/v1/clients/k", `{"limits":{"api":null},"until":""}`},
		{"DELETE", "/admin/v1/clients/k", ``},
		{"GET", "/admin/v1/clients", ``},
		{"POST", "/admin/v1/keys/show", `{"request":{"path":"//../%zz","remote_addr":"x"}}`},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"api","entries":[{"key":"client","value":"a"}]}`},
		{"POST", "/admin/v1/descriptors/reset", `{"domain":"api","entries":[{"key":"health","value":""}]}`},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[{"limit":5,"period":"1h","burst":2}],"until":"2999-01-01T00:00:00Z"}`},
		{"PUT", "/admin/v1/descriptors/overrides/api/client=%2F/x=", `{"limits":[{"algorithm":"gcra","limit":5,"period":"1s"}]}`},
		{"GET", "/admin/v1/descriptors/overrides/api%2Fclient=a", ``},
		{"DELETE", "/admin/v1/descriptors/overrides/api%2Fclient=a", ``},
		{"GET", "/admin/v1/descriptors/overrides", ``},
		{"POST", "/admin/v1/keys/show", `{"request":{"path":"/login","remote_addr":"999.1.1.1:-5"}}`},
		{"POST", "/admin/v1/keys/show", `{"request":{"path":"/login","remote_addr":"not-an-ip"}}`},
		{"POST", "/admin/v1/keys/reset", `{"request":{"path":"/login","remote_addr":"1.2.3.4:99999"}}`},
		{"POST", "/admin/v1/keys/show", `{"request":{"path":"/login","remote_addr":"[2001:db8::1]:x"}}`},
		{"POST", "/admin/v1/keys/show", `{"request":{"path":"/login","remote_addr":"[::1"}}`},
	} {
		f.Add(seed.method, seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !strings.HasPrefix(path, "/admin/") {
			path = "/admin/" + path // the gateway routes only /admin/ here
		}
		r, err := http.NewRequest(method, "http://admin"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Errorf("%s %s %q: status %d: %s", method, path, body, w.Code, w.Body)
		}
		redirect := w.Code >= 300 && w.Code < 400 // the mux cleans paths
		if w.Code != http.StatusNoContent && !redirect && !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s %s %q: status %d, body not JSON: %q", method, path, body, w.Code, w.Body)
		}
		var kb struct {
			Request *struct {
				RemoteAddr *string `json:"remote_addr"`
			} `json:"request"`
		}
		if w.Code == http.StatusOK && json.Unmarshal([]byte(body), &kb) == nil && kb.Request != nil && kb.Request.RemoteAddr != nil && !validRemote(*kb.Request.RemoteAddr) {
			t.Errorf("%s %s %q: status 200 for a remote_addr that is not an IP address (with a port)", method, path, body)
		}
	})
}

// validRemote reports whether s is an IP address, an IP address and a port,
// or a bracketed IPv6 address.
func validRemote(s string) bool {
	if _, err := netip.ParseAddrPort(s); err == nil {
		return true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}
