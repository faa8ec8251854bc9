package adaptive

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pool is an upstream of fixed capacity: a number of workers, each serving
// one request at a time for a service time, the others waiting their turn
// in order. Both can change while it runs. Its clock is the bubble's of
// testing/synctest, so tests run it in virtual time.
type pool struct {
	mu      sync.Mutex
	workers int
	busy    int
	service time.Duration
	spread  float64 // each service time is service × (1 ± spread), uniformly
	rng     *rand.Rand
	waiting []chan struct{}
}

func newPool(workers int, service time.Duration, spread float64) *pool {
	return &pool{workers: workers, service: service, spread: spread, rng: rand.New(rand.NewPCG(1, 2))}
}

// set changes the pool's workers and service time.
func (p *pool) set(workers int, service time.Duration) {
	p.mu.Lock()
	p.workers, p.service = workers, service
	for p.busy < p.workers && len(p.waiting) > 0 {
		p.busy++
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
	}
	p.mu.Unlock()
}

// capacity returns the requests a second the pool can serve.
func (p *pool) capacity() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.workers) / p.service.Seconds()
}

// serve serves one request.
func (p *pool) serve() {
	p.mu.Lock()
	if p.busy < p.workers {
		p.busy++
		p.mu.Unlock()
	} else {
		ch := make(chan struct{})
		p.waiting = append(p.waiting, ch)
		p.mu.Unlock()
		<-ch
	}
	p.mu.Lock()
	d := time.Duration(float64(p.service) * (1 + p.spread*(2*p.rng.Float64()-1)))
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	if len(p.waiting) > 0 && p.busy <= p.workers {
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
	} else {
		p.busy--
	}
	p.mu.Unlock()
}

// ServeHTTP serves a request as one of the pool's, answering 200.
func (p *pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.serve()
	w.WriteHeader(http.StatusOK)
}

// change sets a pool's workers and service time at a moment of a
// scenario.
type change struct {
	at      time.Duration
	workers int
	service time.Duration
}

// scenario is an upstream pool behind a Limiter's Middleware, offered an
// open-loop load (each request arrives on time whether or not the
// earlier ones were answered) at rate a second, for d, each request of
// the class mix gives the i-th, while the pool changes as changes say.
// It runs in a testing/synctest bubble: virtual time, which a loaded
// machine does not disturb.
type scenario struct {
	workers int
	service time.Duration
	o       Options
	rate    float64
	mix     func(i int) Class
	d       time.Duration
	changes []change
}

// result is one request's fate.
type result struct {
	class    Class
	at       time.Duration // its arrival, from the start
	admitted bool
	latency  time.Duration // from arrival to answer, for admitted requests
}

// run is what a scenario did.
type run struct {
	results []result
	waits   []time.Duration // every Admission's Waited
	at      []time.Duration // when each of stats was read
	stats   []Stats
}

// run runs sc and returns what happened; it calls synctest.Test itself.
func (sc scenario) run(t *testing.T) *run {
	t.Helper()
	out := new(run)
	synctest.Test(t, func(t *testing.T) {
		p := newPool(sc.workers, sc.service, 0.2)
		l := mustNew(t, sc.o)
		var mu sync.Mutex
		h := Middleware(l, MiddlewareOptions{
			Class: classOf,
			Observe: func(r *http.Request, a Admission) {
				mu.Lock()
				out.waits = append(out.waits, a.Waited)
				mu.Unlock()
			},
		})(p)
		start := time.Now()
		stop := make(chan struct{})
		var bg sync.WaitGroup
		bg.Go(func() {
			tk := time.NewTicker(100 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					s := l.Stats()
					mu.Lock()
					out.at, out.stats = append(out.at, time.Since(start)), append(out.stats, s)
					mu.Unlock()
				}
			}
		})
		bg.Go(func() {
			for _, c := range sc.changes {
				time.Sleep(c.at - time.Since(start))
				p.set(c.workers, c.service)
			}
		})
		var reqs sync.WaitGroup
		gap := time.Duration(float64(time.Second) / sc.rate)
		for i := 0; time.Since(start) < sc.d; i++ {
			c := sc.mix(i)
			reqs.Go(func() {
				at := time.Since(start)
				req := httptest.NewRequest("GET", "/", nil)
				req = req.WithContext(context.WithValue(req.Context(), classKey{}, c))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				r := result{class: c, at: at, admitted: w.Code == http.StatusOK, latency: time.Since(start) - at}
				mu.Lock()
				out.results = append(out.results, r)
				mu.Unlock()
			})
			time.Sleep(gap)
		}
		reqs.Wait()
		close(stop)
		bg.Wait()
	})
	return out
}

type classKey struct{}

func classOf(r *http.Request) Class {
	c, _ := r.Context().Value(classKey{}).(Class)
	return c
}

// goodput returns the requests a second admitted among those that
// arrived in [from, to).
func (r *run) goodput(from, to time.Duration) float64 {
	n := 0
	for _, x := range r.results {
		if x.admitted && x.at >= from && x.at < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// p99 returns the 99th percentile latency of the requests admitted among
// those that arrived in [from, to).
func (r *run) p99(from, to time.Duration) time.Duration {
	var ls []time.Duration
	for _, x := range r.results {
		if x.admitted && x.at >= from && x.at < to {
			ls = append(ls, x.latency)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	return percentile(ls, 0.99)
}

// success returns the share of class c's requests that arrived in
// [from, to) and were admitted.
func (r *run) success(c Class, from, to time.Duration) float64 {
	n, ok := 0, 0
	for _, x := range r.results {
		if x.class == c && x.at >= from && x.at < to {
			n++
			if x.admitted {
				ok++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// limit returns the mean limit over [from, to), probes left out.
func (r *run) limit(from, to time.Duration) float64 {
	sum, n := 0.0, 0
	for i, at := range r.at {
		if at >= from && at < to && !r.stats[i].Probing {
			sum += float64(r.stats[i].Limit)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// settled returns how long after from the limit stayed within
// [lo, hi] until to, probes left out; to-from if it never did.
func (r *run) settled(from, to time.Duration, lo, hi float64) time.Duration {
	last := from
	for i, at := range r.at {
		if at < from || at >= to || r.stats[i].Probing {
			continue
		}
		if l := float64(r.stats[i].Limit); l < lo || l > hi {
			last = at
		}
	}
	return last - from
}

func every(c Class) func(int) Class { return func(int) Class { return c } }

// mix is one request in ten critical, three default, six sheddable.
func mix(i int) Class {
	switch i % 10 {
	case 0:
		return Critical
	case 1, 2, 3:
		return Default
	}
	return Sheddable
}

// Offered three times what it can serve, an upstream of fixed capacity
// gets a limit near its own concurrency and a half (the default
// tolerance), divided by the default class's 90% share: the upstream
// stays busy (goodput at least 90% of its capacity) while the latency of
// the requests admitted stays within twice the unloaded one.
func TestLimitConvergesNearCapacity(t *testing.T) {
	for _, tc := range []struct {
		workers int
		service time.Duration
	}{
		{4, 50 * time.Millisecond},
		{10, 50 * time.Millisecond},
		{40, 100 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%d workers of %v", tc.workers, tc.service), func(t *testing.T) {
			capacity := float64(tc.workers) / tc.service.Seconds()
			r := scenario{workers: tc.workers, service: tc.service, o: Options{MaxWait: 20 * time.Millisecond},
				rate: 3 * capacity, mix: every(Default), d: 10 * time.Second}.run(t)
			from, to := 3*time.Second, 10*time.Second
			w := float64(tc.workers)
			if l := r.limit(from, to); l < 1.2*w || l > 2.2*w {
				t.Errorf("mean limit %.1f, want near %.1f (1.2 to 2.2 times the %d workers)", l, 1.5*w/0.9, tc.workers)
			}
			if g := r.goodput(from, to); g < 0.9*capacity {
				t.Errorf("goodput %.0f/s, want at least 90%% of the capacity, %.0f/s", g, capacity)
			}
			// The unloaded p99 is the service time's, at most 1.2 times it.
			if p, unloaded := r.p99(from, to), time.Duration(1.2*float64(tc.service)); p > 2*unloaded {
				t.Errorf("p99 of admitted requests %v, want at most twice the unloaded %v", p, unloaded)
			}
		})
	}
}

// When the upstream loses half its workers the limit shrinks to about
// half within a few seconds, and grows back when they return; goodput
// follows the capacity throughout.
func TestLimitFollowsCapacity(t *testing.T) {
	const s = 50 * time.Millisecond
	r := scenario{workers: 10, service: s, o: Options{MaxWait: 20 * time.Millisecond},
		rate: 600, mix: every(Default), d: 30 * time.Second,
		changes: []change{{10 * time.Second, 5, s}, {20 * time.Second, 10, s}}}.run(t)
	full := r.limit(3*time.Second, 10*time.Second)
	half := r.limit(13*time.Second, 20*time.Second)
	back := r.limit(23*time.Second, 30*time.Second)
	t.Logf("mean limit: %.1f, then %.1f with half the workers, then %.1f", full, half, back)
	if half > 0.7*full {
		t.Errorf("with half the workers the limit is %.1f, want at most 70%% of %.1f", half, full)
	}
	if back < 0.85*full {
		t.Errorf("with the workers back the limit is %.1f, want at least 85%% of %.1f", back, full)
	}
	for _, ph := range []struct {
		from, to time.Duration
		capacity float64
	}{{3 * time.Second, 10 * time.Second, 200}, {13 * time.Second, 20 * time.Second, 100}, {23 * time.Second, 30 * time.Second, 200}} {
		if g := r.goodput(ph.from, ph.to); g < 0.9*ph.capacity {
			t.Errorf("goodput %.0f/s in [%v, %v), want at least 90%% of %.0f/s", g, ph.from, ph.to, ph.capacity)
		}
	}
	if d := r.settled(10*time.Second, 20*time.Second, 0.5*half, 1.5*half); d > 3*time.Second {
		t.Errorf("the limit settled %v after the capacity halved, want within 3s", d)
	}
}

// When the upstream's service time doubles, its concurrency is what it
// was: the limit dips while the latency is above the stale no-load
// latency, a probe measures the new one, and the limit comes back
// instead of sinking to its minimum.
func TestLimitSurvivesASlowerUpstream(t *testing.T) {
	r := scenario{workers: 10, service: 50 * time.Millisecond, o: Options{MaxWait: 20 * time.Millisecond},
		rate: 600, mix: every(Default), d: 20 * time.Second,
		changes: []change{{10 * time.Second, 10, 100 * time.Millisecond}}}.run(t)
	before := r.limit(3*time.Second, 10*time.Second)
	after := r.limit(14*time.Second, 20*time.Second)
	t.Logf("mean limit: %.1f, then %.1f at twice the service time", before, after)
	if after < 0.75*before {
		t.Errorf("at twice the service time the limit is %.1f, want near %.1f", after, before)
	}
	if g := r.goodput(14*time.Second, 20*time.Second); g < 90 {
		t.Errorf("goodput %.0f/s, want at least 90%% of the new capacity, 100/s", g)
	}
}

// At five times the upstream's capacity, critical requests (a tenth of
// the load, half the capacity) pass, the default ones take what is left,
// and the sheddable ones absorb the loss; and when the capacity halves,
// critical traffic still passes.
func TestCriticalPassesWhileSheddableIsShed(t *testing.T) {
	const s = 50 * time.Millisecond
	r := scenario{workers: 20, service: s, o: Options{MaxWait: 20 * time.Millisecond},
		rate: 2000, mix: mix, d: 20 * time.Second,
		changes: []change{{10 * time.Second, 14, s}}}.run(t)
	for _, ph := range []struct{ from, to time.Duration }{{2 * time.Second, 10 * time.Second}, {12 * time.Second, 20 * time.Second}} {
		crit, def, shed := r.success(Critical, ph.from, ph.to), r.success(Default, ph.from, ph.to), r.success(Sheddable, ph.from, ph.to)
		t.Logf("[%v, %v): critical %.3f, default %.3f, sheddable %.3f admitted", ph.from, ph.to, crit, def, shed)
		if crit < 0.99 {
			t.Errorf("[%v, %v): %.2f%% of critical requests admitted, want at least 99%%", ph.from, ph.to, 100*crit)
		}
		if !(def > shed) || shed > 0.05 {
			t.Errorf("[%v, %v): default %.3f, sheddable %.3f admitted, want sheddable below default and 5%%", ph.from, ph.to, def, shed)
		}
	}
	for _, w := range r.waits {
		if w > 20*time.Millisecond {
			t.Fatalf("a request waited %v in the queue, longer than its 20ms", w)
		}
	}
}
