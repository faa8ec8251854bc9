package adaptive

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
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
	waiting []chan struct{}
}

func newPool(workers int, service time.Duration, spread float64) *pool {
	return &pool{workers: workers, service: service, spread: spread}
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

// serve serves one request whose random draw is u in [0, 1).
func (p *pool) serve(u float64) {
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
	d := time.Duration(float64(p.service) * (1 + p.spread*(2*u-1)))
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
	p.serve(rand.Float64())
	w.WriteHeader(http.StatusOK)
}

// result is one simulated request's fate.
type result struct {
	class    Class
	start    time.Time
	admitted bool
	waited   time.Duration
	latency  time.Duration // from arrival to answer, for admitted requests
}

// load offers requests to h at rate a second, open loop (each arrives on
// time whether or not the earlier ones were answered), from start until
// end, each of a class class(i) chooses, and records their results.
type load struct {
	mu      sync.Mutex
	results []result
	wg      sync.WaitGroup
}

func (ld *load) run(h http.Handler, rate func(time.Duration) float64, class func(i int) Class, d time.Duration) {
	start := time.Now()
	for i := 0; ; i++ {
		el := time.Since(start)
		if el >= d {
			break
		}
		c := class(i)
		ld.wg.Go(func() {
			t0 := time.Now()
			req := httptest.NewRequest("GET", "/", nil)
			req = req.WithContext(withClass(req.Context(), c))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			r := result{class: c, start: t0, admitted: w.Code == http.StatusOK, latency: time.Since(t0)}
			ld.mu.Lock()
			ld.results = append(ld.results, r)
			ld.mu.Unlock()
		})
		time.Sleep(time.Duration(float64(time.Second) / rate(el)))
	}
	ld.wg.Wait()
}

type classKey struct{}

func withClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, classKey{}, c)
}

func classOf(r *http.Request) Class {
	c, _ := r.Context().Value(classKey{}).(Class)
	return c
}

// trace samples a limiter's Stats every step until stop is closed.
type trace struct {
	mu    sync.Mutex
	at    []time.Duration
	stats []Stats
	n     atomic.Int64
}

func (tr *trace) run(l *Limiter, step time.Duration, stop <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s := l.Stats()
			tr.mu.Lock()
			tr.at = append(tr.at, time.Since(start))
			tr.stats = append(tr.stats, s)
			tr.mu.Unlock()
		}
	}
}

// mean returns the mean limit over [from, to).
func (tr *trace) mean(from, to time.Duration) float64 {
	sum, n := 0.0, 0
	for i, at := range tr.at {
		if at >= from && at < to && !tr.stats[i].Probing {
			sum += float64(tr.stats[i].Limit)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
