package engine

import (
	"net/textproto"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestAppendItems(t *testing.T) {
	lim := sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: 90 * time.Second, Burst: 20}
	tests := []struct {
		got, want string
	}{
		{string(AppendPolicyItem(nil, "login", lim)), `"login";q=10;w=90;sluice-burst=20`},
		{string(AppendPolicyItem(nil, `a"b\c`+"\x01é", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Minute})), `"a\"b\\c???";q=5;w=60`},
		{string(AppendLimitItem([]byte("x, "), "login", -3, 1500*time.Millisecond)), `x, "login";r=0;t=2`},
		{string(AppendLimitItem(nil, "login", 4, 0)), `"login";r=4;t=0`},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%d: got %s, want %s", i, tt.got, tt.want)
		}
	}
}

// The canonical keys are the names in net/http's canonical form.
func TestKeys(t *testing.T) {
	for name, key := range map[string]string{
		NameRateLimitPolicy: KeyRateLimitPolicy, NameRateLimit: KeyRateLimit, NameLimit: KeyLimit,
		NameRemaining: KeyRemaining, NameReset: KeyReset, NameRetryAfter: KeyRetryAfter,
	} {
		if got := textproto.CanonicalMIMEHeaderKey(name); got != key {
			t.Errorf("%s: key %q, want %q", name, key, got)
		}
	}
}

// A request refused by a limit that admits nothing has no decision time:
// the legacy reset counts from the time the caller gives, or from the
// clock when it gives none, never from the zero time.
func TestLegacyResetWithoutDecisionTime(t *testing.T) {
	blocked := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Minute}
	for _, tt := range []struct {
		name string
		now  time.Time
	}{
		{"given", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"clock", time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Call
			c.Add(Check{Name: "blocked", Mode: Enforce, Show: blocked})
			c.Results[0].Outcome, c.Results[0].Never = Limited, true
			before := time.Now()
			fields := c.Fields(nil, Refused, Legacy, nil, tt.now)
			from := tt.now
			if from.IsZero() {
				from = before
			}
			var reset string
			for _, f := range fields {
				if f.Name == NameReset {
					reset = f.Value
				}
			}
			sec, err := strconv.ParseInt(reset, 10, 64)
			if err != nil {
				t.Fatalf("%s = %q: %v (fields %+v)", NameReset, reset, err, fields)
			}
			// The limit's period from now: at least now + 60 s, within a
			// minute of the clock's reading.
			if want := from.Add(time.Minute).Unix(); sec < want || sec > want+60 {
				t.Errorf("%s = %d, want %d (a minute from %v)", NameReset, sec, want, from)
			}
		})
	}
}
