package rls

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
)

// listsDescriptors limits every address, API key and user.
const listsDescriptors = `
domain: test
descriptors:
  - key: remote_address
    rate_limit: {requests_per_unit: 2, unit: minute}
  - key: api_key
    rate_limit: {requests_per_unit: 2, unit: minute}
  - key: user
    rate_limit: {requests_per_unit: 2, unit: minute}
`

// listsService loads a config whose deny list holds 100,000 generated
// networks (every other /32 from 10.0.0.0, and IPv6 /64s) and whose allow
// list holds 100,000 generated keys, from files, as sluice serve does.
func listsService(t *testing.T) (*harness, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	var nets, keys strings.Builder
	nets.WriteString("# generated deny list\n")
	for i := range 100_000 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], 10<<24+uint32(2*i))
		if i%10 == 0 {
			fmt.Fprintf(&nets, "2001:db8:%x:%x::/64\n", i>>16, i&0xffff)
			continue
		}
		nets.WriteString(netip.AddrFrom4(b).String() + "\n")
		fmt.Fprintf(&keys, "partner-key-%06d\n", i)
	}
	for name, content := range map[string]string{"bad-ips.txt": nets.String(), "partners.txt": keys.String(), "test.yaml": listsDescriptors,
		"sluice.yaml": `lists:
  bad-ips: { cidrs_file: bad-ips.txt }
  partners: { keys_file: partners.txt }
service:
  grpc: 127.0.0.1:0
  descriptors: test.yaml
  deny: { remote_address: bad-ips }
  allow: { api_key: [partners], user: [partners] }
`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := config.Load(filepath.Join(dir, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Service.Rules.Lists()) != 3 {
		t.Fatalf("the loaded tree has lists %v, want 3", c.Service.Rules.Lists())
	}
	return start(t, Options{Rules: c.Service.Rules, Observer: m}), reg
}

// TestLists sends requests through gRPC against a deny list and an allow
// list of 100,000 entries each: a denied address is OVER_LIMIT before
// anything is counted, with the problem body; an allow-listed key is never
// limited; the metrics count both.
func TestLists(t *testing.T) {
	h, reg := listsService(t)
	// Listed addresses, first, middle and last, IPv4 and IPv6.
	for _, ip := range []string{"10.0.0.2", "10.1.134.158", "10.3.13.62", "2001:db8:1:8696::9", "2001:db8::1"} {
		resp := h.call(t, request(desc("user", "u1"), desc("remote_address", ip)))
		wantCodes(t, resp, over, ok, over)
		if string(resp.RawBody) != DeniedBody || header(resp, "Content-Type") != "application/problem+json" {
			t.Fatalf("%s: body %q, content type %q; want the problem document", ip, resp.RawBody, header(resp, "Content-Type"))
		}
		if header(resp, engine.NameRetryAfter) != "" || resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("%s: a refusal tells of no limit and no retry, got %v", ip, resp)
		}
	}
	// Nothing was counted for u1: its two requests still pass.
	wantCodes(t, h.call(t, request(desc("user", "u1"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("user", "u1"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("user", "u1"))), over, over)
	// Neighbours of listed addresses are not listed, and are limited.
	for _, ip := range []string{"10.0.0.1", "10.3.13.64", "2001:db8:1:8697::1", "not-an-address"} {
		wantCodes(t, h.call(t, request(desc("remote_address", ip))), ok, ok)
	}
	// An allow-listed key is never limited, and not counted.
	for range 5 {
		resp := h.call(t, request(desc("api_key", "partner-key-099999"), desc("user", "u2")))
		if resp.Statuses[0].Code != ok || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("allow-listed key: got %v", resp.Statuses[0])
		}
	}
	// The user in those requests was counted: the allow list exempts only
	// the descriptor carrying the listed value.
	if resp := h.call(t, request(hits(desc("user", "u2"), 0))); resp.OverallCode != over {
		t.Fatalf("user u2 after 5 requests: got %v, want over its limit", resp.OverallCode)
	}
	// A key not on the list (partner-key-000010 fell on an IPv6 line) is limited.
	wantCodes(t, h.call(t, request(desc("api_key", "partner-key-000010"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("api_key", "partner-key-000010"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("api_key", "partner-key-000010"))), over, over)
	// A denied request with an allow-listed descriptor is still denied.
	wantCodes(t, h.call(t, request(desc("api_key", "partner-key-000001"), desc("remote_address", "10.0.0.4"))), over, ok, over)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_rls_requests_total", []string{"test", "denied"}, 6},
		{"sluice_rls_list_matches_total", []string{"test", "bad-ips", "deny"}, 6},
		{"sluice_rls_list_matches_total", []string{"test", "partners", "allow"}, 5},
		{"sluice_rls_decisions_total", []string{"test", "", "allow_listed"}, 5},
		{"sluice_rls_decisions_total", []string{"test", "", "denied"}, 7}, // the listed descriptors, and one allow-listed one
		{"sluice_rls_decisions_total", []string{"test", "test.user", "denied"}, 5},
	} {
		if got := counter(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
