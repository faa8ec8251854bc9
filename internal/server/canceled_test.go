package server_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server"
)

// A client that hangs up while its request waits out a delay is counted as
// canceled: not as a store error, and its planned delay is not a delay
// served.
func TestGatewayClientLeavesWhileDelayed(t *testing.T) {
	g := start(t, server.Options{Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "export", Action: httplimit.Delay, MaxDelay: time.Minute,
		Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 30 * time.Second},
	}}}})
	if r := get(t, "GET", g.url+"/export", nil); r.StatusCode != 200 {
		t.Fatalf("first request: status %d", r.StatusCode)
	}
	// The second request's turn is 30 s away; its client sends it and
	// hangs up at once. The gateway reads the request, decides to hold it,
	// and sees the client gone.
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /export HTTP/1.1\r\nHost: gateway\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	eventually(t, func() bool { return metric(t, g.admin, `sluice_requests_total{outcome="canceled"}`) == "1" },
		func() string { return `sluice_requests_total{outcome="canceled"} never reached 1` })
	for series, want := range map[string]string{
		`sluice_decisions_total{outcome="canceled",rule="export"}`: "1",
		`sluice_requests_total{outcome="error"}`:                   "",
		`sluice_decisions_total{outcome="error",rule="export"}`:    "",
		`sluice_store_errors_total{backend="memory"}`:              "0",
		`sluice_delay_seconds_count`:                               "0",
	} {
		if got := metric(t, g.admin, series); got != want {
			t.Errorf("%s: got %q, want %q", series, got, want)
		}
	}
}
