package memstore

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// An entry records the definition that wrote it and still takes 48 bytes.
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 48 {
		t.Errorf("entry is %d bytes, want 48", got)
	}
}

// A hint holds a denial under one definition of a policy; a decision under
// another definition of the same policy name carries the key's state, and
// with it the hint must go: the carried state can admit the key sooner
// than the hinted denial says.
func TestCarryClearsDenyHint(t *testing.T) {
	ctx := context.Background()
	s, clk := testStore(t, Options{Shards: 1})
	hourly := testPolicy(t, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Hour})
	minutely, err := sluice.NewPolicy(hourly.Name(), sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.Take(ctx, hourly, "k", 10)
	if d, _ := s.Take(ctx, hourly, "k", 1); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("11th request of 10 per hour: %+v, want denied for 1h", d)
	}
	// The 10 used are carried into the window of +10m, capped at 5.
	clk.Advance(10 * time.Minute)
	if d, _ := s.Take(ctx, minutely, "k", 1); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("under 5 per minute: %+v, want denied for 1m", d)
	}
	// The minute of +10m is over: carried back, the key holds nothing.
	clk.Advance(2 * time.Minute)
	if d, _ := s.Take(ctx, hourly, "k", 1); !d.Allowed || d.Remaining != 9 {
		t.Errorf("back under 10 per hour after the minute: %+v, want admitted with 9 remaining", d)
	}
}
