package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Bounds of the samples kept.
const (
	// minWindowSamples is the fewest samples a window closes with: a
	// percentile of fewer says little.
	minWindowSamples = 10
	// maxWindowSamples closes a window early, bounding its memory.
	maxWindowSamples = 1000
	// minProbeSamples is the fewest samples a probe takes.
	minProbeSamples = 8
	// aboveToProbe is how many windows in a row above the tolerance, the
	// limit shrinking meanwhile by a quarter, make the controller probe
	// early: the upstream may have slowed for good, and the no-load
	// latency it has is stale.
	aboveToProbe = 10
	// minGradient and maxGradient bound one window's change of the limit.
	minGradient, maxGradient = 0.5, 2.0
)

// sample is one request's latency as the controller sees it.
type sample struct {
	latency time.Duration // from its admission to its answer
	probe   uint64        // the probe it was admitted to measure (see admitted), or 0
	dropped bool          // Overloaded: no latency, a sign to shrink
}

// gradient is the controller of a Limiter's limit: pure (times are
// arguments), and not safe for concurrent use (the Limiter's mutex
// guards it). See the package documentation for the algorithm.
type gradient struct {
	limit   float64       // in [MinLimit, MaxLimit]
	noLoad  time.Duration // 0 until the first probe ends
	latency time.Duration // the last window's

	winStart time.Time
	win      []time.Duration // the window's latencies
	drops    int             // the window's dropped samples
	winMax   int             // the most requests in flight during the window
	above    int             // windows in a row above the tolerance
	// aboveFrom is the limit when they began.
	aboveFrom float64

	started    bool
	probing    bool
	probeLimit int
	probeStart time.Time
	probeTaken int // requests admitted to measure the probe
	probeDone  int // of which answered
	probeLat   []time.Duration
	nextProbe  time.Time
	lastProbe  time.Time // when the last probe ended
	probes     uint64
}

func newGradient(o *Options) gradient {
	return gradient{limit: float64(o.InitialLimit)}
}

// effective returns the limit requests are admitted under: the limit,
// or the probe's while the no-load latency is measured.
func (g *gradient) effective() int {
	if g.probing {
		return g.probeLimit
	}
	return max(int(g.limit), 1)
}

// limitFor returns the limit requests of class c are admitted under:
// critical ones are not held back by a probe. They count in flight, and
// the probe measures only requests admitted with no more in flight than
// its limit, so a probe still measures the upstream without load while
// critical traffic alone leaves it room to.
func (g *gradient) limitFor(c Class) int {
	if c == Critical {
		return max(int(g.limit), 1)
	}
	return g.effective()
}

// tick starts or ends a probe that is due at now. The Limiter calls it on
// every admission and sample, so no timer runs: a probe that is due while
// no request comes starts with the next one.
func (g *gradient) tick(o *Options, now time.Time) {
	switch {
	case !g.started:
		// The first requests measure the no-load latency.
		g.started = true
		g.startProbe(o, now)
	case g.probing && now.Sub(g.probeStart) >= g.probeMax(o):
		g.endProbe(o, now)
	case !g.probing && !now.Before(g.nextProbe):
		g.startProbe(o, now)
	}
}

// admitted records that a request was admitted with inFlight in flight.
// It returns the number of the probe the request measures, or 0: a probe
// measures the first requests admitted under it once the ones in flight
// before have drained, and ends when they have all answered, so that
// the fastest answers do not end it first.
func (g *gradient) admitted(inFlight int) (probe uint64) {
	g.winMax = max(g.winMax, inFlight)
	if g.probing && inFlight <= g.probeLimit && g.probeTaken < g.probeSamples() {
		g.probeTaken++
		return g.probes
	}
	return 0
}

// observe takes one request's sample at now and reports whether the
// limit may have changed.
func (g *gradient) observe(o *Options, now time.Time, s sample) bool {
	g.tick(o, now)
	if g.probing {
		if s.probe != g.probes {
			return false // admitted before the probe, or beyond its samples
		}
		g.probeDone++
		if !s.dropped {
			g.probeLat = append(g.probeLat, s.latency)
		}
		if g.probeDone >= g.probeSamples() {
			g.endProbe(o, now)
			return true
		}
		return false
	}
	if s.dropped {
		g.drops++
	} else {
		g.win = append(g.win, s.latency)
	}
	n := len(g.win) + g.drops
	if n >= maxWindowSamples || n >= minWindowSamples && now.Sub(g.winStart) >= o.Window {
		g.update(o, now)
		return true
	}
	return false
}

// update closes the window: it moves the limit by the gradient of the
// window's latency against the no-load latency, smoothed.
func (g *gradient) update(o *Options, now time.Time) {
	n := len(g.win) + g.drops
	grad := minGradient
	if len(g.win) > 0 {
		g.latency = percentile(g.win, o.Percentile)
		if g.noLoad == 0 || g.latency < g.noLoad {
			// A window faster than the no-load latency shows it stale
			// (or, before any probe ended, is all there is): it is
			// lowered at once and, if the window was much faster than
			// a probe's noise, measured again soon.
			if g.noLoad != 0 && g.latency < g.noLoad*9/10 {
				g.nextProbe = minTime(g.nextProbe, g.lastProbe.Add(aboveToProbe*o.Window), now.Add(aboveToProbe*o.Window))
			}
			g.noLoad = g.latency
		}
		target := float64(g.noLoad) * (1 + o.Tolerance)
		grad = min(max(target/float64(max(g.latency, 1)), minGradient), maxGradient)
		if g.latency > time.Duration(target) {
			g.markAbove()
		} else {
			g.above = 0
		}
		if g.drops > 0 {
			// Answers the upstream could not give (Overloaded) shrink
			// the limit by their share of the window.
			grad = min(grad, max(1-float64(g.drops)/float64(n), minGradient))
		}
	} else {
		g.markAbove()
	}
	next := g.limit * grad
	if next > g.limit && float64(g.winMax) < g.limit/2 {
		// The demand did not use half of the limit: the latency says
		// nothing of a larger one.
		next = g.limit
	}
	g.limit += o.Smoothing * (next - g.limit)
	g.limit = min(max(g.limit, float64(o.MinLimit)), float64(o.MaxLimit))
	g.resetWindow(now)
	if g.above >= aboveToProbe && (g.limit <= 0.75*g.aboveFrom || g.limit == float64(o.MinLimit)) && now.Sub(g.lastProbe) >= aboveToProbe*o.Window {
		// Ten windows above the tolerance while the limit shrank by a
		// quarter (or could not): not the noise of a limit at its
		// tolerance, but an upstream slower than its no-load latency
		// says.
		g.startProbe(o, now)
	}
}

// markAbove counts a window above the tolerance.
func (g *gradient) markAbove() {
	if g.above == 0 {
		g.aboveFrom = g.limit
	}
	g.above++
}

func (g *gradient) resetWindow(now time.Time) {
	g.win = g.win[:0]
	g.drops = 0
	g.winMax = 0
	g.winStart = now
}

// startProbe lowers the limit until enough requests admitted under it
// have answered: to limit / (1 + Tolerance)², at least halving it (and at
// least MinLimit). At its mark the limit lets the upstream queue
// Tolerance of its concurrency: one factor of 1 + Tolerance takes that
// queue away, the other leaves room for a limit above its mark. A limit
// too high by a factor k (a no-load latency measured too high) is probed
// at k / (1 + Tolerance) of the upstream's concurrency, so that each
// probe brings a high estimate down until probes fall below the knee.
// Most of the limit stays in use meanwhile.
func (g *gradient) startProbe(o *Options, now time.Time) {
	div := max(2, (1+o.Tolerance)*(1+o.Tolerance))
	g.probeLimit = min(max(int(math.Ceil(g.limit/div)), o.MinLimit), max(int(g.limit), 1))
	g.probing = true
	g.probeStart = now
	g.probeTaken, g.probeDone = 0, 0
	g.probeLat = g.probeLat[:0]
	g.probes++
}

// probeSamples is how many samples end a probe.
func (g *gradient) probeSamples() int { return max(g.probeLimit, minProbeSamples) }

// probeMax is the longest a probe lasts when its samples do not come (the
// traffic is thin, or the upstream does not answer).
func (g *gradient) probeMax(o *Options) time.Duration {
	if g.noLoad == 0 {
		return 10 * o.Window
	}
	return max(2*o.Window, 4*g.noLoad)
}

// endProbe takes the no-load latency from the probe's samples, if it has
// any, and schedules the next probe a jittered ProbeInterval away (±10%,
// so that a fleet's gateways do not probe in step).
func (g *gradient) endProbe(o *Options, now time.Time) {
	if len(g.probeLat) > 0 {
		g.noLoad = percentile(g.probeLat, o.Percentile)
	}
	g.probing = false
	g.lastProbe = now
	g.above = 0
	jitter := 0.9 + 0.2*rand.Float64()
	g.nextProbe = now.Add(time.Duration(float64(o.ProbeInterval) * jitter))
	if g.noLoad == 0 {
		// Nothing measured yet: ask again soon.
		g.nextProbe = now.Add(10 * o.Window)
	}
	g.resetWindow(now)
}

// minTime returns the earliest of a and the latest of b and c.
func minTime(a, b, c time.Time) time.Time {
	if b.Before(c) {
		b = c
	}
	if b.Before(a) {
		return b
	}
	return a
}

// percentile returns the p-quantile of ds (nearest rank), sorting ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
