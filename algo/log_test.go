package algo_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// Entries at the same nanosecond are merged, and so are those recorded at
// an earlier time than the newest; a Log never holds more entries than Count
// and gives memory back once its entries expire.
func TestLogEntries(t *testing.T) {
	r := mustCompile(t, algo.SlidingLog, 1000, time.Second, 0)
	var lg algo.Log
	if lg.Len() != 0 || lg.Bytes() != 0 {
		t.Fatalf("zero Log: got Len %d, Bytes %d; want 0, 0", lg.Len(), lg.Bytes())
	}
	for i := range int64(10) {
		r.Record(&lg, t0+100, 1+i)
	}
	if got := lg.Len(); got != 1 {
		t.Errorf("ten records at the same time: got Len %d, want 1", got)
	}
	r.Record(&lg, t0+50, 1) // a clock that stepped back: merged into the newest
	if got := lg.Len(); got != 1 {
		t.Errorf("a record before the newest: got Len %d, want 1", got)
	}
	if s := r.EvalLog(&lg, t0+100, 0); s.Remaining != 1000-56 {
		t.Errorf("got Remaining %d, want %d", s.Remaining, 1000-56)
	}
	now, newest := t0+1000, t0+100
	for now < t0+500_000_000 {
		s := r.EvalLog(&lg, now, 1)
		if s.Allowed {
			r.Record(&lg, now, 1)
			newest = now
		}
		if lg.Len() > int(r.Count()) {
			t.Fatalf("at t0%+d: got Len %d, want at most Count %d", now-t0, lg.Len(), r.Count())
		}
		now += 100_000
	}
	if lg.Len() != 945 || newest != t0+1000+943*100_000 {
		t.Fatalf("got Len %d and the last admission at t0%+d, want 945 entries and the last of 944 more at t0%+d", lg.Len(), newest-t0, 1000+943*100_000)
	}
	if got, want := r.LogExpiry(&lg, now), newest+int64(time.Second); got != want {
		t.Errorf("LogExpiry: got t0%+d, want t0%+d (the newest entry plus Period)", got-t0, want-t0)
	}
	big := lg.Bytes()
	// Evaluating changes nothing, not even the expired entries.
	later := t0 + 1000 + 900*100_000 + int64(time.Second)
	if s := r.EvalLog(&lg, later, 0); s.Remaining != 1000-43 || lg.Len() != 945 || lg.Bytes() != big {
		t.Errorf("a peek with 43 entries left: got Remaining %d, Len %d, Bytes %d; want %d, 945, %d", s.Remaining, lg.Len(), lg.Bytes(), 1000-43, big)
	}
	// Recording drops the expired entries, and the ring shrinks to within
	// four times what it holds.
	for i := range int64(10) {
		r.Record(&lg, later+i, 1)
	}
	if lg.Len() != 53 || lg.Bytes() >= big || lg.Bytes() > 4*16*lg.Len() {
		t.Errorf("43 entries left and 10 more: got Len %d, Bytes %d (from %d); want 53 entries in at most %d bytes", lg.Len(), lg.Bytes(), big, 4*16*53)
	}
	if s := r.EvalLog(&lg, later+10, 0); s.Remaining != 1000-53 {
		t.Errorf("got Remaining %d, want %d", s.Remaining, 1000-53)
	}
	if got, want := r.LogExpiry(&lg, later), later+9+int64(time.Second); got != want {
		t.Errorf("LogExpiry: got later%+d, want later%+d (the newest entry plus Period)", got-later, want-later)
	}
	end := later + 9 + int64(time.Second)
	r.Record(&lg, end, 1)
	if lg.Len() != 1 || lg.Bytes() > 8*16 {
		t.Errorf("all entries expired but one: got Len %d, Bytes %d; want 1 entry and at most 8 slots", lg.Len(), lg.Bytes())
	}
	if s := r.EvalLog(&lg, end+int64(time.Second), 0); s != (algo.Status{Allowed: true, Remaining: 1000}) {
		t.Errorf("a period after the last entry: got %+v, want a fresh status", s)
	}
	if got := r.LogExpiry(&lg, end+int64(time.Second)+1); got != end+int64(time.Second)+1 {
		t.Errorf("LogExpiry of a log whose entries have all expired: got now%+d, want now", got-end-int64(time.Second)-1)
	}
}

// All yields the entries oldest first, merged as recorded, and stops when
// asked to.
func TestLogAll(t *testing.T) {
	r := mustCompile(t, algo.SlidingLog, 100, time.Second, 0)
	var lg algo.Log
	for _, e := range [][2]int64{{t0 + 10, 1}, {t0 + 20, 2}, {t0 + 20, 3}, {t0 + 30, 4}} {
		r.Record(&lg, e[0], e[1])
	}
	var got [][2]int64
	for at, n := range lg.All() {
		got = append(got, [2]int64{at - t0, n})
	}
	if want := [][2]int64{{10, 1}, {20, 5}, {30, 4}}; !slices.Equal(got, want) {
		t.Errorf("All: got %v, want %v (times from t0)", got, want)
	}
	for range lg.All() {
		break // a loop that stops early must not panic
	}
}

// A peek changes nothing, even when the clock then steps back. (EvalLog used
// to drop the entries that no longer counted at a peek's time, so that after
// a peek one Period on, a clock stepping back admitted a request that the
// entry should have denied: more than Count in a Period.)
func TestSlidingLogPeekThenClockBack(t *testing.T) {
	r := mustCompile(t, algo.SlidingLog, 1, time.Second, 0)
	var without, with algo.Log
	for _, lg := range []*algo.Log{&without, &with} {
		if s := r.EvalLog(lg, t0, 1); !s.Allowed {
			t.Fatalf("first request denied: %+v", s)
		}
		r.Record(lg, t0, 1)
	}
	r.EvalLog(&with, t0+int64(time.Second), 0) // a peek when the entry has just expired
	// The clock steps back half a second: the entry at t0 counts again.
	want := r.EvalLog(&without, t0+500_000_000, 1)
	got := r.EvalLog(&with, t0+500_000_000, 1)
	if want.Allowed || got != want {
		t.Errorf("after a peek one Period later, then back: got %+v, want %+v as without the peek (denied)", got, want)
	}
}
