package topk

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// stream feeds s a Zipf-distributed stream of decisions over keys, a
// tenth of them refused, spread over span from start, ticking every
// second, and returns the exact counts of decisions and refusals by key
// from since on.
func stream(s *Sketch, seed int64, n int, keys uint64, start time.Time, span time.Duration, since time.Time) (reqs, lim map[string]uint64) {
	r := rand.New(rand.NewSource(seed))
	z := rand.NewZipf(r, 1.1, 1, keys-1)
	reqs, lim = map[string]uint64{}, map[string]uint64{}
	for i := range n {
		now := start.Add(span * time.Duration(i) / time.Duration(n)).Truncate(time.Second)
		s.Tick(now)
		key := fmt.Sprintf("10.0.%d.%d", z.Uint64()/256, z.Uint64()%256)
		o := Allowed
		if r.Intn(10) == 0 {
			o = Limited
		}
		s.Record(key, o)
		if now.Before(since) {
			continue
		}
		reqs[key]++
		if o == Limited {
			lim[key]++
		}
	}
	return reqs, lim
}

// The reported counts bound the exact ones, each entry's error stays
// within the window's bound, and every key above the bound is reported,
// over a skewed stream of many more keys than counters.
func TestErrorBound(t *testing.T) {
	tests := []struct {
		name   string
		window Window
		span   time.Duration
		// factor is the bound's multiple of N/k.
		factor uint64
	}{
		{"minute", Minute, 55 * time.Second, 1},
		{"hour", Hour, 59 * time.Minute, 3},
	}
	for _, tt := range tests {
		for _, by := range []By{ByRequests, ByLimited} {
			t.Run(fmt.Sprintf("%s/by%d", tt.name, by), func(t *testing.T) {
				s := New(t0)
				reqs, lim := stream(s, 7, 200_000, 20_000, t0, tt.span, t0)
				exact, total := reqs, uint64(0)
				if by == ByLimited {
					exact = lim
				}
				for _, c := range exact {
					total += c
				}
				rep := s.Top(by, tt.window, -1)
				if got := rep.Requests; got != 200_000 {
					t.Errorf("Requests = %d, want 200000", got)
				}
				bound := tt.factor * total / Capacity
				listed := map[string]bool{}
				for _, e := range rep.Entries {
					listed[e.Key] = true
					got := e.Requests
					if by == ByLimited {
						got = e.Limited
					}
					if f := exact[e.Key]; f > got || f < got-e.Error {
						t.Errorf("%s: exact %d outside [%d, %d]", e.Key, f, got-e.Error, got)
					}
					if e.Error > bound {
						t.Errorf("%s: error %d over the bound %d", e.Key, e.Error, bound)
					}
					if e.Limited > e.Requests {
						t.Errorf("%s: limited %d over requests %d", e.Key, e.Limited, e.Requests)
					}
				}
				heavy := 0
				for k, f := range exact {
					if f > bound {
						heavy++
						if !listed[k] {
							t.Errorf("%s occurred %d times, over the bound %d, but is not listed", k, f, bound)
						}
					}
				}
				if heavy == 0 {
					t.Fatalf("no key above the bound %d: the stream is not skewed enough to test anything", bound)
				}
				// The top of the list is the true top.
				top := rep.Entries[0].Key
				for k, f := range exact {
					if f > exact[top] {
						t.Errorf("top is %s (%d), but %s occurred %d times", top, exact[top], k, f)
					}
				}
			})
		}
	}
}

// Decisions leave the minute window a minute after their interval, and the
// hour window an hour after.
func TestWindowsRoll(t *testing.T) {
	s := New(t0)
	for range 5 {
		s.Record("old", Limited)
	}
	s.Tick(t0.Add(30 * time.Second))
	s.Record("new", Allowed)
	tests := []struct {
		at         time.Duration
		window     Window
		want       []string
		wantTotals uint64
	}{
		{30 * time.Second, Minute, []string{"old", "new"}, 6},
		{65 * time.Second, Minute, []string{"new"}, 1},
		{95 * time.Second, Minute, nil, 0},
		{95 * time.Second, Hour, []string{"old", "new"}, 6},
		{59 * time.Minute, Hour, []string{"old", "new"}, 6},
		{61 * time.Minute, Hour, nil, 0},
	}
	for _, tt := range tests {
		s.Tick(t0.Add(tt.at))
		rep := s.Top(ByRequests, tt.window, 10)
		var got []string
		for _, e := range rep.Entries {
			got = append(got, e.Key)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || rep.Requests != tt.wantTotals {
			t.Errorf("at %v, window %v: got %v (%d decisions), want %v (%d)", tt.at, tt.window.Duration(), got, rep.Requests, tt.want, tt.wantTotals)
		}
	}
}

func TestTopExactWhileFewKeys(t *testing.T) {
	s := New(t0)
	for i := range 30 {
		for range i + 1 {
			s.Record(fmt.Sprintf("k%02d", i), Allowed)
		}
	}
	for range 7 {
		s.Record("k03", Limited)
	}
	rep := s.Top(ByLimited, Minute, 5)
	if len(rep.Entries) != 1 {
		t.Fatalf("got %d limited keys, want 1: %+v", len(rep.Entries), rep.Entries)
	}
	if got, want := rep.Entries[0], (Entry{Key: "k03", Requests: 11, Limited: 7}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	rep = s.Top(ByRequests, Minute, 3)
	var keys []string
	for _, e := range rep.Entries {
		keys = append(keys, fmt.Sprintf("%s=%d±%d", e.Key, e.Requests, e.Error))
	}
	if got, want := fmt.Sprint(keys), "[k29=30±0 k28=29±0 k27=28±0]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// The summary's index stays consistent with its counters however keys
// come and go: every monitored key is found, and its count bounds hold.
func TestSummaryIndex(t *testing.T) {
	var s summary
	r := rand.New(rand.NewSource(3))
	exact := map[uint64]uint64{}
	for range 100_000 {
		h := uint64(r.Intn(500)) * 0x9e3779b97f4a7c15 // distinct hashes, clustered in the index
		if r.Intn(4) == 0 {
			h = uint64(r.Intn(8)) << 8 // the same home slot for many
		}
		s.add(h, "k")
		exact[h]++
	}
	if s.n != Capacity {
		t.Fatalf("%d counters in use, want %d", s.n, Capacity)
	}
	for i := range s.n {
		c := &s.slots[i]
		if got := s.find(c.hash); got != i {
			t.Fatalf("find(%x) = %d, want %d", c.hash, got, i)
		}
		if f := exact[c.hash]; f > c.count || f < c.count-c.err {
			t.Errorf("%x: exact %d outside [%d, %d]", c.hash, f, c.count-c.err, c.count)
		}
	}
	used := 0
	for _, v := range s.index {
		if v != 0 {
			used++
		}
	}
	if used != Capacity {
		t.Errorf("%d index entries, want %d", used, Capacity)
	}
}

func TestRates(t *testing.T) {
	s := New(t0)
	s.Record("a", Allowed)
	s.Tick(t0.Add(time.Second))
	s.Record("a", Limited)
	s.Record("a", Limited)
	s.Tick(t0.Add(3 * time.Second))
	s.Record("a", Error)
	got := s.Rates(4)
	want := [][numOutcomes]uint64{{1, 0, 0, 0}, {0, 2, 0, 0}, {}, {0, 0, 0, 1}}
	for i := range want {
		if got[i].Counts != want[i] || !got[i].Time.Equal(t0.Add(time.Duration(i)*time.Second)) {
			t.Errorf("second %d: got %v at %v, want %v at %v", i, got[i].Counts, got[i].Time, want[i], t0.Add(time.Duration(i)*time.Second))
		}
	}
	// Seconds RateSeconds ago are forgotten.
	s.Tick(t0.Add((RateSeconds + 3) * time.Second))
	for _, r := range s.Rates(RateSeconds) {
		if r.Counts != [numOutcomes]uint64{} {
			t.Errorf("%v: %v, want nothing", r.Time, r.Counts)
		}
	}
}

func TestSetRetain(t *testing.T) {
	var set Set
	set.Tick(t0)
	set.Sketch("a").Record("x", Allowed)
	set.Sketch("b")
	set.Retain(func(n string) bool { return n == "a" })
	if got := fmt.Sprint(set.Names()); got != "[a]" {
		t.Errorf("Names = %s, want [a]", got)
	}
	if k, ok := set.Lookup("a"); !ok || k.Top(ByRequests, Minute, 1).Requests != 1 {
		t.Errorf("a's sketch was lost")
	}
}

// BenchmarkRecord is a decision's cost: a key among many, a tenth refused.
func BenchmarkRecord(b *testing.B) {
	s := New(t0)
	keys := make([]string, 4096)
	r := rand.New(rand.NewSource(1))
	z := rand.NewZipf(r, 1.1, 1, 4095)
	for i := range keys {
		keys[i] = fmt.Sprintf("203.0.113.%d:%d", z.Uint64()%256, i)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Record(keys[i&4095], Outcome((i%10+1)/10))
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				s.Record(keys[i&4095], Outcome((i%10+1)/10))
				i++
			}
		})
	})
}
