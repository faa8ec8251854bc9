package overrides_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/overrides"
)

// An override may give a client only a billing anchor, and its own limits
// may be calendar quotas in a zone; bad anchors, periods and zones are
// ErrInvalid.
func TestAnchorAndCalendarLimits(t *testing.T) {
	e := overrides.Client{Client: "k", Anchor: "15T09:00",
		Limits: map[string]overrides.Limit{"api": {Algorithm: "fixed_window", Limit: 100, Period: "month", Timezone: "Europe/Berlin"}}}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	o, err := e.Override()
	if err != nil {
		t.Fatal(err)
	}
	if o.Anchor == nil || o.Anchor.String() != "15T09:00" {
		t.Errorf("anchor: got %v, want 15T09:00", o.Anchor)
	}
	if got := o.Limits["api"].String(); got != "fixed_window 100/month zone=Europe/Berlin" {
		t.Errorf("limit: got %q", got)
	}
	if err := (overrides.Client{Client: "k", Anchor: "09:00"}).Validate(); err != nil {
		t.Errorf("an anchor alone: %v", err)
	}
	for _, bad := range []overrides.Client{
		{Client: "k", Anchor: "32"},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 1, Period: "month"}}},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "fixed_window", Limit: 1, Period: "month", Timezone: "Mars/Olympus"}}},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "fixed_window", Limit: 1, Period: "1h", Timezone: "UTC"}}},
		{Client: "k"},
	} {
		if err := bad.Validate(); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", bad, err)
		}
	}
}
