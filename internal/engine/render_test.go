package engine

import (
	"net/textproto"
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
