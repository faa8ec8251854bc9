package httplimit_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

func keyStringLimiter(t testing.TB) (*httplimit.Limiter, *recorder) {
	t.Helper()
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Minute}
	ip, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t.(*testing.T), httplimit.Options{ClientIP: ip, Rules: []httplimit.Rule{
		{Name: "all", Key: []httplimit.KeyPart{httplimit.IP(), httplimit.Header("X-Api-Key"), httplimit.Method(), httplimit.Global()}, Limit: lim},
		{Name: "by-method", Key: []httplimit.KeyPart{httplimit.Method(), httplimit.Query("q")}, Limit: lim},
	}})
	return e.lim, e.obs
}

func TestKeyString(t *testing.T) {
	long := strings.Repeat("k", httplimit.MaxValueLen+1)
	tests := []struct {
		name             string
		remote, key, tgt string
		method           string
		want             []string // by rule
	}{
		{name: "values", remote: "192.0.2.7:1", key: "k-123", tgt: "/a?q=x", method: "POST",
			want: []string{"ip=192.0.2.7/32 header:X-Api-Key=k-123 method=POST global", "method=POST query:q=x"}},
		{name: "missing parts keyed by the address", remote: "192.0.2.7:1", tgt: "/a", method: "GET",
			want: []string{"ip=192.0.2.7/32 header:X-Api-Key=missing:192.0.2.7/32 method=GET global", "method=GET query:q=missing:192.0.2.7/32"}},
		{name: "IPv6 per /64, a quoted value", remote: "[2001:db8:1:2::5]:1", key: "a b", tgt: "/a?q=%22", method: "GET",
			want: []string{`ip=2001:db8:1:2::/64 header:X-Api-Key="a b" method=GET global`, `method=GET query:q="\""`}},
		{name: "a long value by its digest", remote: "192.0.2.7:1", key: long, tgt: "/a?q=1", method: "GET",
			want: []string{"ip=192.0.2.7/32 header:X-Api-Key=#", "method=GET query:q=1"}},
		{name: "no usable address", remote: "@", key: "k", tgt: "/a?q=1", method: "GET",
			want: []string{"ip=@ header:X-Api-Key=k method=GET global", "method=GET query:q=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, obs := keyStringLimiter(t)
			r, _ := http.NewRequest(tt.method, "http://h"+tt.tgt, nil)
			r.RemoteAddr = tt.remote
			if tt.key != "" {
				r.Header.Set("X-Api-Key", tt.key)
			}
			lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(&discard{h: http.Header{}}, r)
			ev := obs.last(t)
			for i, re := range ev.Rules {
				got, err := lim.KeyString(re.Rule, re.Key)
				if err != nil {
					t.Fatalf("KeyString(%q, %q): %v", re.Rule, re.Key, err)
				}
				if !strings.HasPrefix(got, tt.want[i]) {
					t.Errorf("KeyString(%q, %q): got %q, want %q", re.Rule, re.Key, got, tt.want[i])
				}
			}
		})
	}
}

func TestKeyStringRefusesOtherKeys(t *testing.T) {
	lim, _ := keyStringLimiter(t)
	good, err := lim.RuleKey("by-method", []string{"GET", "x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ rule, key string }{
		{"by-method", good + "x"},
		{"by-method", good[:len(good)-1]},
		{"by-method", "m3:GETq9:x"},
		{"all", good},
		{"all", "i192.0.2.1/32h1:am3:GET"},
		{"all", "i192.0.2.1/99h1:am3:GETg0:"},
		{"by-method", "m#short"},
	} {
		if _, err := lim.KeyString(tt.rule, tt.key); !errors.Is(err, httplimit.ErrInvalidKey) {
			t.Errorf("KeyString(%q, %q): got %v, want ErrInvalidKey", tt.rule, tt.key, err)
		}
	}
	if _, err := lim.KeyString("nope", good); !errors.Is(err, httplimit.ErrUnknownRule) {
		t.Errorf("unknown rule: got %v, want ErrUnknownRule", err)
	}
}

// FuzzKeyString holds KeyString to RuleKey: the key of any values reads
// back with each value in it, and no input makes it panic.
func FuzzKeyString(f *testing.F) {
	f.Add("GET", "x", "m3:GETq1:x")
	f.Add("", "", "mi192.0.2.1/32mu1:@")
	f.Add("P", strings.Repeat("a", 200), "m1:Pq#AAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, method, q, raw string) {
		lim, _ := keyStringLimiter(t)
		_, _ = lim.KeyString("by-method", raw)
		_, _ = lim.KeyString("all", raw)
		key, err := lim.RuleKey("by-method", []string{method, q})
		if err != nil {
			return
		}
		got, err := lim.KeyString("by-method", key)
		if err != nil {
			t.Fatalf("KeyString of RuleKey(%q, %q) = %q: %v", method, q, key, err)
		}
		if len(q) <= httplimit.MaxValueLen && !strings.Contains(got, "query:q=") {
			t.Fatalf("KeyString(%q) = %q: the query part is lost", key, got)
		}
	})
}
