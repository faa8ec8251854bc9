package adaptive

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ctl is a controller with its options, on a clock the test moves.
type ctl struct {
	t   *testing.T
	o   Options
	g   gradient
	now time.Time
}

func newCtl(t *testing.T, o Options) *ctl {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	o = o.withDefaults()
	return &ctl{t: t, o: o, g: newGradient(&o), now: t0}
}

// probe runs the first probe to its end with answers of latency lat.
func (c *ctl) probe(lat time.Duration) {
	c.t.Helper()
	c.g.tick(&c.o, c.now)
	if !c.g.probing {
		c.t.Fatal("no probe runs")
	}
	var probes []uint64
	for i := 1; i <= c.g.probeSamples(); i++ {
		probes = append(probes, c.g.admitted(min(i, c.g.probeLimit)))
	}
	c.now = c.now.Add(lat)
	for _, p := range probes {
		c.g.observe(&c.o, c.now, sample{latency: lat, probe: p})
	}
	if c.g.probing {
		c.t.Fatalf("the probe still runs after %d answers", len(probes))
	}
}

// window feeds n answers of latency lat with inFlight in flight, spread
// over one Window, and reports whether the last one closed it.
func (c *ctl) window(n, inFlight int, lat time.Duration, dropped int) bool {
	c.t.Helper()
	closed := false
	for i := range n {
		c.g.admitted(inFlight)
		c.now = c.now.Add(c.o.Window / time.Duration(n))
		closed = c.g.observe(&c.o, c.now, sample{latency: lat, dropped: i < dropped})
	}
	return closed
}

func TestGradientMovesTheLimit(t *testing.T) {
	const noLoad = 100 * time.Millisecond
	for _, tc := range []struct {
		name     string
		o        Options
		inFlight int // 0: the limit
		lat      time.Duration
		dropped  int
		want     float64
	}{
		// Smoothing 1 takes a window's whole change: at 1.5 times the
		// no-load latency (the default tolerance), the limit holds.
		{"at the tolerance", Options{Smoothing: 1}, 0, 150 * time.Millisecond, 0, 20},
		{"below it, it grows", Options{Smoothing: 1}, 0, 120 * time.Millisecond, 0, 25},
		{"at the no-load latency", Options{Smoothing: 1}, 0, 100 * time.Millisecond, 0, 30},
		{"at most doubling", Options{Smoothing: 1, Tolerance: 2}, 0, 100 * time.Millisecond, 0, 40},
		// A window faster than the no-load latency lowers it first.
		{"faster than no load", Options{Smoothing: 1}, 0, 10 * time.Millisecond, 0, 30},
		{"above it, it shrinks", Options{Smoothing: 1}, 0, 200 * time.Millisecond, 0, 15},
		{"at most halving", Options{Smoothing: 1}, 0, 2 * time.Second, 0, 10},
		{"smoothed", Options{Smoothing: 0.5}, 0, 200 * time.Millisecond, 0, 17.5},
		{"a larger tolerance", Options{Smoothing: 1, Tolerance: 1}, 0, 200 * time.Millisecond, 0, 20},
		{"within the max", Options{Smoothing: 1, MaxLimit: 25}, 0, 100 * time.Millisecond, 0, 25},
		{"within the min", Options{Smoothing: 1, MinLimit: 12}, 0, 2 * time.Second, 0, 12},
		// Under light demand the latency says nothing of a larger limit.
		{"no growth under light demand", Options{Smoothing: 1}, 9, 100 * time.Millisecond, 0, 20},
		{"but shrinking", Options{Smoothing: 1}, 9, 200 * time.Millisecond, 0, 15},
		// Answers the upstream could not give shrink the limit by their
		// share.
		{"drops", Options{Smoothing: 1}, 0, 150 * time.Millisecond, 4, 16},
		{"all dropped", Options{Smoothing: 1}, 0, 150 * time.Millisecond, 20, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, tc.o)
			c.probe(noLoad)
			if c.g.noLoad != noLoad {
				t.Fatalf("no-load latency %v, want %v", c.g.noLoad, noLoad)
			}
			in := tc.inFlight
			if in == 0 {
				in = c.g.effective()
			}
			if !c.window(20, in, tc.lat, tc.dropped) {
				t.Fatal("the window did not close")
			}
			if c.g.limit != tc.want {
				t.Errorf("limit %v, want %v", c.g.limit, tc.want)
			}
		})
	}
}

func TestGradientWindow(t *testing.T) {
	c := newCtl(t, Options{Window: 100 * time.Millisecond})
	c.probe(10 * time.Millisecond)
	// Nine answers over a whole window are too few; the tenth closes it.
	for i := range 9 {
		c.now = c.now.Add(20 * time.Millisecond)
		if c.g.observe(&c.o, c.now, sample{latency: 10 * time.Millisecond}) {
			t.Fatalf("answer %d closed the window", i+1)
		}
	}
	if !c.g.observe(&c.o, c.now, sample{latency: 10 * time.Millisecond}) {
		t.Fatal("the tenth answer, past the window's time, did not close it")
	}
	// Within the window's time, only 1000 answers close it.
	for i := range maxWindowSamples - 1 {
		if c.g.observe(&c.o, c.now, sample{latency: 10 * time.Millisecond}) {
			t.Fatalf("answer %d closed the window early", i+1)
		}
	}
	if !c.g.observe(&c.o, c.now, sample{latency: 10 * time.Millisecond}) {
		t.Fatal("answer 1000 did not close the window")
	}
}

func TestGradientProbe(t *testing.T) {
	for _, tc := range []struct {
		o             Options
		probe, sample int // the probe's limit and samples
	}{
		// 45 / (1 + 0.5)²; as many samples.
		{Options{InitialLimit: 45}, 20, 20},
		// At least halving, with a small tolerance; at least 8 samples.
		{Options{InitialLimit: 10, Tolerance: 0.2}, 5, 8},
		{Options{InitialLimit: 40, Tolerance: 1}, 10, 10},
		// At least MinLimit.
		{Options{InitialLimit: 10, MinLimit: 8}, 8, 8},
	} {
		t.Run(fmt.Sprintf("%+v", tc.o), func(t *testing.T) {
			tc.o.ProbeInterval = 10 * time.Second
			c := newCtl(t, tc.o)
			limit := c.g.effective()
			// The first request starts a probe.
			c.g.tick(&c.o, c.now)
			if !c.g.probing || c.g.effective() != tc.probe {
				t.Fatalf("probing %v at %d, want a probe at %d", c.g.probing, c.g.effective(), tc.probe)
			}
			// Requests admitted before the probe, or above its limit, do
			// not measure it; the first admitted under it do, and it ends
			// when they have all answered, the slowest too.
			if c.g.observe(&c.o, c.now, sample{latency: time.Millisecond}) || !c.g.probing {
				t.Fatal("an answer admitted before the probe ended it")
			}
			if p := c.g.admitted(tc.probe + 1); p != 0 {
				t.Fatalf("a request admitted above the probe's limit measures probe %d", p)
			}
			var probes []uint64
			for i := range tc.sample + 2 {
				p := c.g.admitted(tc.probe)
				if (p != 0) != (i < tc.sample) {
					t.Fatalf("request %d admitted under the probe measures probe %d", i+1, p)
				}
				probes = append(probes, p)
			}
			// Latencies of 10ms, 20ms, ..., and a slow last one.
			for i := range tc.sample - 1 {
				c.now = c.now.Add(10 * time.Millisecond)
				if c.g.observe(&c.o, c.now, sample{latency: time.Duration(i+1) * 10 * time.Millisecond, probe: probes[i]}); !c.g.probing {
					t.Fatalf("the probe ended after %d of its %d answers", i+1, tc.sample)
				}
			}
			c.now = c.now.Add(time.Second)
			c.g.observe(&c.o, c.now, sample{latency: time.Second, probe: probes[tc.sample-1]})
			if c.g.probing {
				t.Fatalf("the probe still runs after its %d answers", tc.sample)
			}
			want := time.Duration((tc.sample+1)/2) * 10 * time.Millisecond // the median
			if c.g.noLoad != want {
				t.Errorf("no-load latency %v, want %v", c.g.noLoad, want)
			}
			if c.g.effective() != limit {
				t.Errorf("limit %d after the probe, want %d back", c.g.effective(), limit)
			}
			// The next probe comes 10s ± 10% later.
			if d := c.g.nextProbe.Sub(c.now); d < 9*time.Second || d > 11*time.Second {
				t.Errorf("next probe in %v, want 9s to 11s", d)
			}
			c.now = c.g.nextProbe.Add(-time.Millisecond)
			if c.g.tick(&c.o, c.now); c.g.probing {
				t.Fatal("a probe started early")
			}
			c.now = c.now.Add(time.Millisecond)
			if c.g.tick(&c.o, c.now); !c.g.probing {
				t.Fatal("no probe at its time")
			}
			// A probe whose answers do not come ends after 4 no-load
			// latencies (or 2 windows), keeping the no-load latency.
			end := max(4*want, 2*c.o.Window)
			c.now = c.now.Add(end - time.Millisecond)
			if c.g.tick(&c.o, c.now); !c.g.probing {
				t.Fatal("the probe ended early")
			}
			c.now = c.now.Add(time.Millisecond)
			if c.g.tick(&c.o, c.now); c.g.probing || c.g.noLoad != want {
				t.Fatalf("probing %v with no-load latency %v after %v without answers, want the probe over and %v kept", c.g.probing, c.g.noLoad, end, want)
			}
			if c.g.probes != 2 {
				t.Errorf("%d probes counted, want 2", c.g.probes)
			}
		})
	}
}

// An upstream that slowed for good (its service time doubled) keeps every
// window above the tolerance however low the limit goes: after ten such
// windows a probe measures the new no-load latency, instead of the limit
// sinking to its minimum.
func TestGradientProbesEarlyWhenTheUpstreamSlows(t *testing.T) {
	c := newCtl(t, Options{ProbeInterval: time.Hour})
	c.probe(100 * time.Millisecond)
	for i := range aboveToProbe {
		if c.g.probing {
			t.Fatalf("probing after %d windows above the tolerance", i)
		}
		c.window(20, c.g.effective(), 200*time.Millisecond, 0)
	}
	if !c.g.probing {
		t.Fatalf("no probe after %d windows above the tolerance", aboveToProbe)
	}
	low := c.g.limit
	c.probe(200 * time.Millisecond)
	if c.g.noLoad != 200*time.Millisecond {
		t.Fatalf("no-load latency %v after the probe, want 200ms", c.g.noLoad)
	}
	// At its new no-load latency the upstream lets the limit grow back.
	c.window(20, c.g.effective(), 200*time.Millisecond, 0)
	if c.g.limit <= low {
		t.Errorf("limit %v after a window at the new no-load latency, want above %v", c.g.limit, low)
	}
}

// A window faster than the no-load latency lowers it at once, and when it
// is much faster (by 10%) the next probe comes within ten windows.
func TestGradientFasterWindowLowersTheNoLoadLatency(t *testing.T) {
	c := newCtl(t, Options{ProbeInterval: time.Hour})
	c.probe(100 * time.Millisecond)
	c.now = c.now.Add(time.Minute)
	c.window(20, c.g.effective(), 95*time.Millisecond, 0)
	if c.g.noLoad != 95*time.Millisecond {
		t.Errorf("no-load latency %v, want 95ms", c.g.noLoad)
	}
	if d := c.g.nextProbe.Sub(c.now); d < time.Minute {
		t.Errorf("next probe in %v after a window 5%% faster, want it left at its time", d)
	}
	c.window(20, c.g.effective(), 60*time.Millisecond, 0)
	if c.g.noLoad != 60*time.Millisecond {
		t.Errorf("no-load latency %v, want 60ms", c.g.noLoad)
	}
	if d := c.g.nextProbe.Sub(c.now); d > aboveToProbe*c.o.Window {
		t.Errorf("next probe in %v, want within %v", d, aboveToProbe*c.o.Window)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{ms(5), 0.5, 5 * time.Millisecond},
		{ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.9, 4 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.01, 1 * time.Millisecond},
	} {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}
