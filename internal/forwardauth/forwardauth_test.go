package forwardauth_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/forwardauth"
	"github.com/sluicehq/sluice/memstore"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// recorder is a limiter-shaped middleware that remembers the request it was
// given and lets it through.
type recorder struct{ got *http.Request }

func (rec *recorder) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.got = r.Clone(r.Context())
		next.ServeHTTP(w, r)
	})
}

// authRequest sends one auth request with the given headers to url.
func authRequest(t *testing.T, url string, hdr map[string][]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func forwarded(method, uri, host, xff string) map[string][]string {
	h := map[string][]string{}
	for k, v := range map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Forwarded-Host": host, "X-Forwarded-For": xff, "X-Forwarded-Proto": "https"} {
		if v != "" {
			h[k] = []string{v}
		}
	}
	return h
}

func TestRebuildsTheOriginalRequest(t *testing.T) {
	rec := &recorder{}
	h, err := forwardauth.New(rec.limit, forwardauth.Options{TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	tests := []struct {
		name                  string
		hdr                   map[string][]string
		method, path, rawPath string
		query, host, remote   string
		xff                   string
	}{
		{name: "origin form", hdr: forwarded("POST", "/login?next=%2Fhome", "API.example.com:8443", "192.0.2.7"),
			method: "POST", path: "/login", query: "next=%2Fhome", host: "API.example.com:8443", remote: "192.0.2.7:0"},
		{name: "escaped path kept", hdr: forwarded("GET", "/a%2Fb/c", "example.com", "192.0.2.7"),
			method: "GET", path: "/a/b/c", rawPath: "/a%2Fb/c", host: "example.com", remote: "192.0.2.7:0"},
		{name: "absolute form reduced to path and query", hdr: forwarded("GET", "https://evil.example/x?y=1", "example.com", "192.0.2.7"),
			method: "GET", path: "/x", query: "y=1", host: "example.com", remote: "192.0.2.7:0"},
		{name: "chain: last entry is the peer, the rest stays X-Forwarded-For", hdr: forwarded("GET", "/", "example.com", "1.2.3.4, 198.51.100.9, 203.0.113.5"),
			method: "GET", path: "/", host: "example.com", remote: "203.0.113.5:0", xff: "1.2.3.4, 198.51.100.9"},
		{name: "IPv6 client with port", hdr: forwarded("GET", "/", "example.com", "[2001:db8::1]:4711"),
			method: "GET", path: "/", host: "example.com", remote: "[2001:db8::1]:0"},
		{name: "no host", hdr: forwarded("DELETE", "/x", "", "192.0.2.7"),
			method: "DELETE", path: "/x", remote: "192.0.2.7:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.got = nil
			tt.hdr["X-Api-Key"] = []string{"k1"}
			tt.hdr["Forwarded"] = []string{"for=198.51.100.1"}
			resp := authRequest(t, srv.URL, tt.hdr)
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d (%s), want 200", resp.StatusCode, b)
			}
			o := rec.got
			if o.Method != tt.method || o.URL.Path != tt.path || o.URL.RawPath != tt.rawPath || o.URL.RawQuery != tt.query || o.Host != tt.host || o.RemoteAddr != tt.remote {
				t.Errorf("got %s %q (raw %q) ?%q host %q from %q, want %s %q (raw %q) ?%q host %q from %q",
					o.Method, o.URL.Path, o.URL.RawPath, o.URL.RawQuery, o.Host, o.RemoteAddr,
					tt.method, tt.path, tt.rawPath, tt.query, tt.host, tt.remote)
			}
			if got := o.Header.Get("X-Forwarded-For"); got != tt.xff {
				t.Errorf("X-Forwarded-For %q, want %q", got, tt.xff)
			}
			if got := o.Header.Get("X-Api-Key"); got != "k1" {
				t.Errorf("copied header X-Api-Key %q, want k1", got)
			}
			if got := o.Header.Get("Forwarded"); got != "for=198.51.100.1" {
				t.Errorf("copied header Forwarded %q, want for=198.51.100.1", got)
			}
			for _, k := range []string{"X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := o.Header[k]; ok {
					t.Errorf("%s %q left on the rebuilt request", k, v)
				}
			}
		})
	}
}

func TestMalformedForwardingHeaders(t *testing.T) {
	rec := &recorder{}
	h, err := forwardauth.New(rec.limit, forwardauth.Options{TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ok := func() map[string][]string { return forwarded("GET", "/x", "example.com", "192.0.2.7") }
	with := func(k string, v ...string) map[string][]string {
		h := ok()
		if v == nil {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	tests := []struct {
		name string
		hdr  map[string][]string
		want string // in the detail
	}{
		{"missing method", with("X-Forwarded-Method"), "X-Forwarded-Method is missing"},
		{"method not a token", with("X-Forwarded-Method", "GE T"), "not an HTTP method"},
		{"huge method", with("X-Forwarded-Method", strings.Repeat("G", 100)), "the most is 64"},
		{"missing URI", with("X-Forwarded-Uri"), "X-Forwarded-Uri is missing"},
		{"relative URI", with("X-Forwarded-Uri", "login"), "want a path"},
		{"bad escape", with("X-Forwarded-Uri", "/a%zz"), "not a request target"},
		{"space", with("X-Forwarded-Uri", "/a b"), "must be percent-encoded"},
		{"other scheme", with("X-Forwarded-Uri", "ftp://x/y"), "want a path"},
		{"huge URI", with("X-Forwarded-Uri", "/"+strings.Repeat("a", forwardauth.MaxURILen)), "the most is 8192"},
		{"URI sent twice", with("X-Forwarded-Uri", "/a", "/b"), "sent 2 times"},
		{"bad host", with("X-Forwarded-Host", "a b/c"), "is not a host"},
		{"huge host", with("X-Forwarded-Host", strings.Repeat("h", 300)), "the most is 262"},
		{"bad proto", with("X-Forwarded-Proto", "gopher"), "want http or https"},
		{"missing for", with("X-Forwarded-For"), "X-Forwarded-For is missing"},
		{"for not an address", with("X-Forwarded-For", "1.2.3.4, unknown"), "is not an IP address"},
		{"huge for", with("X-Forwarded-For", strings.Repeat("1.2.3.4,", 2000)+"1.2.3.4"), "the most is 8192"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.got = nil
			resp := authRequest(t, srv.URL, tt.hdr)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q, want application/problem+json", ct)
			}
			var p struct {
				Status int
				Detail string
			}
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			if p.Status != 400 || !strings.Contains(p.Detail, tt.want) {
				t.Errorf("problem %d %q, want 400 mentioning %q", p.Status, p.Detail, tt.want)
			}
			if len(p.Detail) > 300 {
				t.Errorf("detail is %d bytes: a huge header came back in the answer", len(p.Detail))
			}
			if rec.got != nil {
				t.Error("the limiter saw a request that was not described")
			}
		})
	}
}

func TestOriginalErrors(t *testing.T) {
	r := httptest.NewRequest("GET", "/auth", nil)
	_, err := forwardauth.Original(r)
	if !errors.Is(err, forwardauth.ErrBadForward) {
		t.Fatalf("got %v, want ErrBadForward", err)
	}
	if !strings.HasPrefix(err.Error(), "forwardauth: ") {
		t.Errorf("error %q does not start with the package name", err)
	}
}

func TestNewRefusesNoTrustedProxies(t *testing.T) {
	rec := &recorder{}
	if _, err := forwardauth.New(rec.limit, forwardauth.Options{}); !errors.Is(err, forwardauth.ErrInvalidOptions) {
		t.Errorf("no trusted proxies: got %v, want ErrInvalidOptions", err)
	}
	if _, err := forwardauth.New(nil, forwardauth.Options{TrustedProxies: loopback}); !errors.Is(err, forwardauth.ErrInvalidOptions) {
		t.Errorf("no limiter: got %v, want ErrInvalidOptions", err)
	}
}

// newLimited returns an endpoint trusting trusted, in front of a limiter
// with a per-IP rule of 2 per hour on POST /login, and the fake clock.
func newLimited(t *testing.T, trusted []netip.Prefix, rules ...httplimit.Rule) (*forwardauth.Handler, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	if rules == nil {
		rules = []httplimit.Rule{{
			Name:  "login",
			Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{"POST"}},
			Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 2, Period: time.Hour},
		}}
	}
	ip, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Options{Store: store, Rules: rules, ClientIP: ip})
	if err != nil {
		t.Fatal(err)
	}
	h, err := forwardauth.New(lim.Handler, forwardauth.Options{TrustedProxies: trusted})
	if err != nil {
		t.Fatal(err)
	}
	return h, clk
}

func TestLimitsTheDescribedRequest(t *testing.T) {
	h, _ := newLimited(t, loopback)
	srv := httptest.NewServer(h)
	defer srv.Close()

	for i, want := range []int{200, 200, 429} {
		resp := authRequest(t, srv.URL, forwarded("POST", "/login/", "example.com", "192.0.2.7"))
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		if got := resp.Header.Get("X-Ratelimit-Limit"); got != "2" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want 2", i+1, got)
		}
		if got := resp.Header.Get("Ratelimit-Policy"); got != `"login";q=2;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if want == 429 {
			if got := resp.Header.Get("Retry-After"); got != "3600" {
				t.Errorf("Retry-After %q, want 3600", got)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), `"violated-policies":["login"]`) {
				t.Errorf("body %s does not name the rule", b)
			}
		}
	}
	// Another client, another method, another path: not limited by the rule.
	for _, hdr := range []map[string][]string{
		forwarded("POST", "/login", "example.com", "192.0.2.8"),
		forwarded("GET", "/login", "example.com", "192.0.2.7"),
		forwarded("POST", "/logout", "example.com", "192.0.2.7"),
	} {
		if resp := authRequest(t, srv.URL, hdr); resp.StatusCode != 200 {
			t.Errorf("%v: status %d, want 200", hdr, resp.StatusCode)
		}
	}
	// A client cannot dodge the limit by writing its own X-Forwarded-For:
	// the proxy appends the address it saw, and that one counts.
	if resp := authRequest(t, srv.URL, forwarded("POST", "/login", "example.com", "1.2.3.4, 192.0.2.7")); resp.StatusCode != 429 {
		t.Errorf("spoofed X-Forwarded-For: status %d, want 429", resp.StatusCode)
	}
}

func TestUntrustedCallerIsForbidden(t *testing.T) {
	h, _ := newLimited(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	srv := httptest.NewServer(h)
	defer srv.Close()
	// However the headers describe it, a caller outside the trusted
	// networks gets 403 and charges nothing.
	for range 5 {
		resp := authRequest(t, srv.URL, forwarded("POST", "/login", "example.com", "192.0.2.7"))
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "not a trusted proxy") {
			t.Errorf("body %s does not say why", b)
		}
		if v := resp.Header.Get("Ratelimit"); v != "" {
			t.Errorf("RateLimit %q on a 403", v)
		}
	}
}

func TestDelayHoldsTheAnswer(t *testing.T) {
	h, _ := newLimited(t, loopback, httplimit.Rule{
		Name:     "paced",
		Match:    httplimit.Match{Paths: []string{"/*"}},
		Limit:    sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 200 * time.Millisecond, Burst: 1},
		Action:   httplimit.Delay,
		MaxDelay: time.Hour,
	})
	// The delay itself is the limiter's (tested there); here it matters
	// only that the endpoint answers 200 after it, not 429. The fake clock
	// does not move, so the second request waits its turn on a real timer.
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 2 {
		start := time.Now()
		if resp := authRequest(t, srv.URL, forwarded("GET", "/x", "example.com", "192.0.2.7")); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
		}
		// A timer never fires early: the second answer was held for the
		// rule's interval at least.
		if held := time.Since(start); i == 1 && held < 200*time.Millisecond {
			t.Errorf("second answer after %v, want it held for 200ms", held)
		}
	}
}

func TestSoftRuleMarksTheAnswer(t *testing.T) {
	h, _ := newLimited(t, loopback, httplimit.Rule{
		Name:   "cheap",
		Match:  httplimit.Match{Paths: []string{"/*"}},
		Limit:  sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Hour},
		Action: httplimit.Soft,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i, want := range []string{"", "cheap"} {
		hdr := forwarded("GET", "/x", "example.com", "192.0.2.7")
		hdr["Sluice-Over-Limit"] = []string{"forged"}
		resp := authRequest(t, srv.URL, hdr)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
		}
		if got := resp.Header.Get("Sluice-Over-Limit"); got != want {
			t.Errorf("request %d: Sluice-Over-Limit %q, want %q", i+1, got, want)
		}
	}
}

func FuzzOriginal(f *testing.F) {
	f.Add("GET", "/x?y=1", "example.com", "https", "192.0.2.1")
	f.Add("POST", "https://h/a%2Fb", "[2001:db8::1]:443", "http", "1.2.3.4, [2001:db8::2]:80")
	f.Add("", "", "", "", "")
	f.Add("G\x00T", "/%zz", "a b", "gopher", "unknown")
	f.Add("GET", "*", "h", "", ",,,")
	f.Add("GET", "http://", "h", "", "1.2.3.4,")
	f.Fuzz(func(t *testing.T, method, uri, host, proto, xff string) {
		r := httptest.NewRequest("GET", "/auth", nil)
		for k, v := range map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Forwarded-Host": host, "X-Forwarded-Proto": proto, "X-Forwarded-For": xff} {
			r.Header[k] = []string{v}
		}
		o, err := forwardauth.Original(r)
		if err != nil {
			if !errors.Is(err, forwardauth.ErrBadForward) {
				t.Fatalf("error %v does not wrap ErrBadForward", err)
			}
			return
		}
		if o.Method == "" || o.URL == nil || o.URL.Path == "" || o.URL.Path[0] != '/' {
			t.Fatalf("accepted a request without method or path: %q %#v", o.Method, o.URL)
		}
		if _, err := netip.ParseAddrPort(o.RemoteAddr); err != nil {
			t.Fatalf("RemoteAddr %q: %v", o.RemoteAddr, err)
		}
		if o.URL.Host != "" || o.URL.Scheme != "" {
			t.Fatalf("the rebuilt URL kept a scheme or host: %#v", o.URL)
		}
	})
}

// A proxy behind a CDN: the proxy's peer is the CDN, which the limiter's
// client_ip settings trust, so the client is the entry the CDN appended.
func TestProxyBehindTrustedProxy(t *testing.T) {
	store := memstore.New(memstore.Options{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	defer store.Close()
	ip, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Options{Store: store, ClientIP: ip, Rules: []httplimit.Rule{{
		Name:  "per-ip",
		Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 1, Period: time.Hour},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := forwardauth.New(lim.Handler, forwardauth.Options{TrustedProxies: loopback})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tt := range []struct {
		xff  string
		want int
	}{
		{"192.0.2.7, 203.0.113.5", 200},
		{"192.0.2.8, 203.0.113.5", 200},          // another client of the CDN
		{"192.0.2.7, 203.0.113.6", 429},          // the first, through another CDN node
		{"9.9.9.9, 192.0.2.7, 203.0.113.5", 429}, // the first, with a forged entry in front
	} {
		if resp := authRequest(t, srv.URL, forwarded("GET", "/", "example.com", tt.xff)); resp.StatusCode != tt.want {
			t.Errorf("X-Forwarded-For %q: status %d, want %d", tt.xff, resp.StatusCode, tt.want)
		}
	}
}
