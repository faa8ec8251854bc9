package proxy

import (
	"strings"
	"testing"
)

func TestWriteForwardedValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com", "api.example.com"},
		{"api.example.com:8443", `"api.example.com:8443"`},
		{"[2001:db8::1]:80", `"[2001:db8::1]:80"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"", `""`},
	} {
		var b strings.Builder
		if writeForwardedValue(&b, tc.in); b.String() != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, b.String(), tc.want)
		}
	}
}

func TestPeerOf(t *testing.T) {
	for _, tc := range []struct {
		remote, want string
		ok           bool
	}{
		{"192.0.2.1:1234", "192.0.2.1", true},
		{"[2001:db8::1]:1234", "2001:db8::1", true},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1", true},
		{"/run/sluice.sock", "", false},
		{"", "", false},
	} {
		got, a, ok := peerOf(tc.remote)
		if got != tc.want || ok != tc.ok || (ok && a.String() != tc.want) {
			t.Errorf("%q: got %q %v %v, want %q %v", tc.remote, got, a, ok, tc.want, tc.ok)
		}
	}
}
