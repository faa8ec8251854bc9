package gateway

import "testing"

func TestAppendForwardedValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com", "api.example.com"},
		{"api.example.com:8443", `"api.example.com:8443"`},
		{"[2001:db8::1]:80", `"[2001:db8::1]:80"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"", `""`},
	} {
		if got := string(appendForwardedValue(nil, tc.in)); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
}
