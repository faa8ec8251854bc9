package clientip

import (
	"net/netip"
	"testing"
)

// parseIPv4 agrees with netip.ParseAddr: whatever it accepts, netip
// accepts as the same address, and it accepts every IPv4 address in
// dotted-decimal form.
func checkParseIPv4(t *testing.T, s string) {
	t.Helper()
	got, ok := parseIPv4(s)
	want, err := netip.ParseAddr(s)
	switch {
	case ok && (err != nil || got != want):
		t.Fatalf("parseIPv4(%q) = %v, netip.ParseAddr: %v, %v", s, got, want, err)
	case !ok && err == nil && want.Is4():
		t.Fatalf("parseIPv4(%q) refused the IPv4 address %v", s, want)
	}
}

func TestParseIPv4(t *testing.T) {
	for _, s := range []string{
		"0.0.0.0", "1.2.3.4", "255.255.255.255", "192.0.2.1", "10.0.0.10",
		"", "1", "1.2.3", "1.2.3.4.5", "1..2.3", ".1.2.3", "1.2.3.", "256.1.1.1",
		"1.2.3.256", "01.2.3.4", "1.2.3.04", "1.2.3.00", "1.2.3.0", "1000.1.1.1",
		"1.2.3.4 ", " 1.2.3.4", "1.2.3.4%eth0", "::1", "::ffff:1.2.3.4", "1.2.3.-4",
		"1.2.3.4x", "99999999999999999999.1.1.1",
	} {
		checkParseIPv4(t, s)
	}
	if a, ok := parseHostPort("192.0.2.7:8080"); !ok || a != netip.MustParseAddr("192.0.2.7") {
		t.Errorf("parseHostPort(192.0.2.7:8080) = %v, %v", a, ok)
	}
	if _, ok := parseHostPort("192.0.2.07:8080"); ok {
		t.Error("parseHostPort accepted a leading zero, which netip refuses")
	}
}

func FuzzParseIPv4(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "01.2.3.4", "256.0.0.1", "1.2.3", "::1", "0.0.0.0"} {
		f.Add(s)
	}
	f.Fuzz(checkParseIPv4)
}
