package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

// sluice serve with a descriptor file's monthly quota and service.anchor:
// Envoy's requests get duration_until_reset to the end of the month
// counted from the customer's anchor (or the file's, without one), and
// sluice descriptor show prints the current period.
func TestServeCalendarQuota(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte("a-token-of-thirty-two-characters\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(`domain: api
descriptors:
  - key: api_key
    rate_limit:
      requests_per_unit: 1000
      period: month
      calendar: {anchor: "31T00:00", timezone: America/New_York}
`), 0o600)
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte("server: { admin: 127.0.0.1:0 }\nadmin: { api: true, token_file: admin-token }\n"+
		"service: { grpc: 127.0.0.1:0, descriptors: api.yaml, anchor: billing_anchor }\n"), 0o600)
	addrs := clitest.Start(t, cfg, "--log-format", "json").Listening()
	conn, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := rlsv3.NewRateLimitServiceClient(conn)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, anchor := range []string{"", "15T09:00"} {
		spec := calendar.Spec{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 31}, Zone: ny}
		ds := []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k-" + anchor}}}}
		if anchor != "" {
			a, err := calendar.ParseAnchor(anchor)
			if err != nil {
				t.Fatal(err)
			}
			spec.Anchor = a
			ds = append(ds, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "billing_anchor", Value: anchor}}})
		}
		cal, err := calendar.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		_, end := cal.Bounds(before)
		s := resp.Statuses[0]
		got := s.DurationUntilReset.AsDuration()
		// The decision's time is between before and after (one second of
		// slack for a period ending in between, and rounding).
		if got > end.Sub(before)+time.Second || got < end.Sub(after)-time.Second {
			t.Errorf("anchor %q: reset in %v, want about %v (to %v)", anchor, got, end.Sub(before), end)
		}
		if s.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH || s.LimitRemaining != 999 {
			t.Errorf("anchor %q: limit %v, %d remaining; want 1000 per MONTH, 999", anchor, s.CurrentLimit, s.LimitRemaining)
		}
	}

	var out, errb bytes.Buffer
	args := []string{"descriptor", "show", "api", "api_key=k-", "--admin", "http://" + addrs["admin"], "--token-file", tokenFile}
	if c := cli.Run(context.Background(), args, &out, &errb); c != 0 {
		t.Fatalf("descriptor show: exit %d, %q", c, errb.String())
	}
	cal, _ := calendar.New(calendar.Spec{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 31}, Zone: ny})
	start, end := cal.Bounds(time.Now())
	if !strings.Contains(out.String(), "PERIOD") || !strings.Contains(out.String(), start.Format("2006-01-02 15:04 -0700")+" to "+end.Format("2006-01-02 15:04 -0700")) ||
		!regexpLine(out.String(), "api.api_key", "k-", "1000/month", "fixed_window", "1", "999", "true") {
		t.Errorf("descriptor show: %q", out.String())
	}
}
