package clientip_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

func resolver(t testing.TB, header string, trusted ...string) *clientip.Resolver {
	t.Helper()
	p, err := clientip.ParsePrefixes(trusted)
	if err != nil {
		t.Fatal(err)
	}
	r, err := clientip.New(clientip.Options{TrustedProxies: p, Header: header})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func request(remote string, header string, values ...string) *http.Request {
	r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for _, v := range values {
		r.Header.Add(header, v)
	}
	return r
}

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  string
		trusted []string
		remote  string
		values  []string
		want    string
	}{
		{"peer", "", nil, "192.0.2.1:5000", nil, "192.0.2.1"},
		{"peer without port", "", nil, "192.0.2.1", nil, "192.0.2.1"},
		{"IPv6 peer", "", nil, "[2001:db8::1]:5000", nil, "2001:db8::1"},
		{"mapped peer is IPv4", "", nil, "[::ffff:192.0.2.1]:5000", nil, "192.0.2.1"},
		{"zone dropped", "", nil, "[fe80::1%eth0]:5000", nil, "fe80::1"},
		{"spoofed XFF from untrusted peer", "", []string{"10.0.0.0/8"}, "192.0.2.1:5000", []string{"203.0.113.9"}, "192.0.2.1"},
		{"spoofed XFF, no trusted proxies", "", nil, "192.0.2.1:5000", []string{"203.0.113.9"}, "192.0.2.1"},
		{"trusted proxy", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"client prepends a lie", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"1.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"chain of trusted proxies", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"1.1.1.1, 203.0.113.9, 10.0.0.7, 10.0.0.8"}, "203.0.113.9"},
		{"several header lines", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"1.1.1.1", "203.0.113.9, 10.0.0.7"}, "203.0.113.9"},
		{"ports in XFF", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"203.0.113.9:1234"}, "203.0.113.9"},
		{"bracketed IPv6 with port", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"[2001:db8::5]:443"}, "2001:db8::5"},
		{"bare IPv6", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"2001:db8::5"}, "2001:db8::5"},
		{"mapped in XFF", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"garbage stops at the nearest trusted hop", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"203.0.113.9, garbage, 10.0.0.7"}, "10.0.0.7"},
		{"garbage right of everything", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"not-an-ip"}, "10.0.0.1"},
		{"all trusted takes the leftmost", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"no header", "", []string{"10.0.0.0/8"}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"IPv6 trusted proxy", "", []string{"2001:db8:ff::/48"}, "[2001:db8:ff::1]:5000", []string{"198.51.100.4"}, "198.51.100.4"},
		{"mapped trusted prefix", "", []string{"::ffff:10.0.0.0/104"}, "10.0.0.1:5000", []string{"198.51.100.4"}, "198.51.100.4"},
		{"Forwarded", "Forwarded", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{`for=1.1.1.1, For="[2001:db8::9]:80";proto=https`}, "2001:db8::9"},
		{"Forwarded unknown", "Forwarded", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"for=1.1.1.1, for=unknown, for=10.0.0.3"}, "10.0.0.3"},
		{"Forwarded obfuscated", "Forwarded", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"for=_hidden"}, "10.0.0.1"},
		{"Forwarded unbracketed IPv6 is malformed", "Forwarded", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"for=2001:db8::9"}, "10.0.0.1"},
		{"Forwarded ignores XFF", "Forwarded", []string{"10.0.0.0/8"}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{"X-Real-IP", "X-Real-IP", []string{"10.0.0.0/8"}, "10.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resolver(t, tc.header, tc.trusted...)
			name := tc.header
			if name == "" {
				name = "X-Forwarded-For"
			}
			req := request(tc.remote, name, tc.values...)
			if tc.name == "Forwarded ignores XFF" {
				req.Header.Set("X-Forwarded-For", "203.0.113.9")
			}
			a, err := r.Addr(req)
			if err != nil {
				t.Fatalf("Addr: %v", err)
			}
			if a.String() != tc.want {
				t.Errorf("got %s, want %s", a, tc.want)
			}
		})
	}
}

func TestLongChainsAreBounded(t *testing.T) {
	r := resolver(t, "", "10.0.0.0/8")
	chain := strings.Repeat("10.0.0.9, ", 10000) + "10.0.0.8"
	a, err := r.Addr(request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.1, "+chain))
	if err != nil {
		t.Fatal(err)
	}
	// Past MaxHops the walk stops at the nearest trusted hop: never at the
	// client-written entry on the far left.
	if a.String() != "10.0.0.9" {
		t.Errorf("got %s, want the last trusted hop examined", a)
	}
}

func TestNoAddr(t *testing.T) {
	r := resolver(t, "")
	for _, remote := range []string{"", "@", "pipe", "1.2.3.4:port", "[::1", "[::1]x"} {
		if _, err := r.Addr(request(remote, "")); !errors.Is(err, clientip.ErrNoAddr) {
			t.Errorf("RemoteAddr %q: got %v, want ErrNoAddr", remote, err)
		}
	}
}

func TestKey(t *testing.T) {
	r := resolver(t, "")
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1/32",
		"::ffff:192.0.2.1":     "192.0.2.1/32",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"fe80::1%eth0":         "fe80::/64",
	} {
		if got := r.Key(netip.MustParseAddr(in)).String(); got != want {
			t.Errorf("Key(%s): got %s, want %s", in, got, want)
		}
	}
	r2, err := clientip.New(clientip.Options{IPv4Prefix: 24, IPv6Prefix: 128})
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Key(netip.MustParseAddr("192.0.2.77")).String(); got != "192.0.2.0/24" {
		t.Errorf("IPv4Prefix 24: got %s", got)
	}
	if got := r2.Key(netip.MustParseAddr("2001:db8::1")).String(); got != "2001:db8::1/128" {
		t.Errorf("IPv6Prefix 128: got %s", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []clientip.Options{
		{IPv4Prefix: 33}, {IPv4Prefix: -1}, {IPv6Prefix: 129}, {Header: "X-Client"},
	} {
		if _, err := clientip.New(o); !errors.Is(err, clientip.ErrInvalidOptions) {
			t.Errorf("New(%+v): got %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := clientip.ParsePrefixes([]string{"10.0.0.0/8", "10.0.0.0/33"}); err == nil || !strings.Contains(err.Error(), `entry 1 "10.0.0.0/33"`) {
		t.Errorf("ParsePrefixes: got %v, want the bad entry named", err)
	}
	p, err := clientip.ParsePrefixes([]string{"192.0.2.1", "2001:db8::1", " 10.1.2.3/8 "})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{p[0].String(), p[1].String(), p[2].String()}; strings.Join(got, " ") != "192.0.2.1/32 2001:db8::1/128 10.0.0.0/8" {
		t.Errorf("ParsePrefixes: got %v", got)
	}
}

func TestAppendKeyDoesNotAllocate(t *testing.T) {
	r := resolver(t, "", "10.0.0.0/8")
	req := request("192.0.2.1:5000", "")
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		buf, _ = r.AppendKey(buf[:0], req)
	})
	if allocs != 0 || string(buf) != "192.0.2.1/32" {
		t.Errorf("AppendKey: %q with %v allocations, want 192.0.2.1/32 with 0", buf, allocs)
	}
}

func FuzzAddr(f *testing.F) {
	f.Add("10.0.0.1:5000", "1.1.1.1, 203.0.113.9", false)
	f.Add("10.0.0.1:5000", `for="[2001:db8::9]:80";proto=https, for=unknown`, true)
	f.Add("[::ffff:10.0.0.1]:1", "::ffff:1.2.3.4,,, [::1]:80", false)
	f.Add("192.0.2.1:1", "203.0.113.9", false)
	trusted, _ := clientip.ParsePrefixes([]string{"10.0.0.0/8", "::1/128"})
	xff, _ := clientip.New(clientip.Options{TrustedProxies: trusted})
	fwd, _ := clientip.New(clientip.Options{TrustedProxies: trusted, Header: "Forwarded"})
	none, _ := clientip.New(clientip.Options{})
	f.Fuzz(func(t *testing.T, remote, header string, useForwarded bool) {
		r, name := xff, "X-Forwarded-For"
		if useForwarded {
			r, name = fwd, "Forwarded"
		}
		req := request(remote, name, header)
		peer, perr := none.Addr(req)
		a, err := r.Addr(req)
		if (err != nil) != (perr != nil) {
			t.Fatalf("error %v with trusted proxies, %v without", err, perr)
		}
		if err != nil {
			return
		}
		if peer != a && !strings.Contains(header, a.String()) && !strings.Contains(strings.ToLower(header), strings.ToLower(a.Unmap().String())) {
			// The client is the peer or an address written in the header
			// (possibly in a mapped or expanded form).
			if !headerHasAddr(header, a) {
				t.Fatalf("client %s is neither the peer %s nor in the header %q", a, peer, header)
			}
		}
		if peer != a && !r.Trusted(peer) {
			t.Fatalf("untrusted peer %s, but client %s", peer, a)
		}
		if a.Is4In6() || a.Zone() != "" {
			t.Fatalf("client %s is mapped or zoned", a)
		}
	})
}

// headerHasAddr reports whether some token of the header parses to a.
func headerHasAddr(header string, a netip.Addr) bool {
	for _, tok := range strings.FieldsFunc(header, func(r rune) bool { return strings.ContainsRune(` ,;="[]`, r) }) {
		for _, cand := range []string{tok, strings.TrimPrefix(strings.ToLower(tok), "for")} {
			if b, err := netip.ParseAddr(cand); err == nil && b.Unmap().WithZone("") == a {
				return true
			}
			if i := strings.LastIndexByte(cand, ':'); i > 0 {
				if b, err := netip.ParseAddr(cand[:i]); err == nil && b.Unmap() == a {
					return true
				}
			}
		}
	}
	return false
}
