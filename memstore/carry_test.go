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

// Reserve and Cancel carry a state written under another definition before
// they act, as Take does.
func TestReserveAndCancelCarry(t *testing.T) {
	ctx := context.Background()
	s, _ := testStore(t, Options{Shards: 1})
	four := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 4, Period: time.Hour})
	eight, err := sluice.NewPolicy(four.Name(), sluice.Limit{Algorithm: sluice.GCRA, Count: 8, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Take(ctx, four, "k", 4)
	// 4 used of 8, 7m30s each: a reservation of 4 more is due at once, one
	// of 5 more waits 7m30s.
	if d, _ := s.Reserve(ctx, eight, "k", 4, 0); !d.Allowed || d.Delay != 0 {
		t.Fatalf("Reserve(4) under 8 per hour after 4 used: %+v, want admitted at once", d)
	}
	d, _ := s.Reserve(ctx, eight, "k", 1, time.Hour)
	if !d.Allowed || d.Delay != 7*time.Minute+30*time.Second {
		t.Fatalf("Reserve(1) with 8 of 8 used: %+v, want a delay of 7m30s", d)
	}
	// Cancel under the first definition carries back (9 units of 8 in
	// debt, capped at 4 units of 15m) and gives back one.
	if err := s.Cancel(ctx, four, "k", 1, d.Time.Add(d.Delay)); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Peek(ctx, four, "k"); !p.Allowed || p.Remaining != 1 {
		t.Errorf("after the cancel under 4 per hour: %+v, want 1 remaining", p)
	}
}

// Peek under a sliding_log definition of a limit whose state is a bucket's
// carries the state into a log of its own and leaves the store as it was.
func TestPeekAcrossLogAndTableWritesNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := testStore(t, Options{Shards: 1})
	bucket := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 4, Period: time.Hour})
	logs, err := sluice.NewPolicy(bucket.Name(), sluice.Limit{Algorithm: sluice.SlidingLog, Count: 4, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Take(ctx, bucket, "k", 3)
	sh := &s.shards[0]
	if d, _ := s.Peek(ctx, logs, "k"); !d.Allowed || d.Remaining != 1 {
		t.Errorf("Peek under the log: %+v, want 1 remaining", d)
	}
	if sh.tab.used != 1 || len(sh.logs) != 0 {
		t.Fatalf("after the peek: %d table entries and %d logs, want 1 and 0", sh.tab.used, len(sh.logs))
	}
	// Take moves it: the table entry becomes a log of one entry of 3.
	if d, _ := s.Take(ctx, logs, "k", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Take under the log: %+v, want admitted with 0 remaining", d)
	}
	if sh.tab.used != 0 || len(sh.logs) != 1 {
		t.Fatalf("after the take: %d table entries and %d logs, want 0 and 1", sh.tab.used, len(sh.logs))
	}
	// And back: the log's 4 become a full bucket.
	if d, _ := s.Take(ctx, bucket, "k", 1); d.Allowed || d.RetryAfter != 15*time.Minute {
		t.Errorf("Take under the bucket again: %+v, want denied for 15m", d)
	}
	if sh.tab.used != 1 || len(sh.logs) != 0 {
		t.Errorf("after moving back: %d table entries and %d logs, want 1 and 0", sh.tab.used, len(sh.logs))
	}
}
