package server

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/topk"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkDecisionPath is a gateway decision with the server's observer
// (metrics and rejection log), without the heavy hitters (top=off, the
// decision path before them) and with them (top=on): their cost is the
// difference. 4096 clients, Zipf-distributed, on a rule of 100 a minute,
// so that some are refused.
func BenchmarkDecisionPath(b *testing.B) {
	const clients = 4096
	reqs := make([]*http.Request, clients)
	z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, clients-1)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api", nil)
		reqs[i].Header.Set("X-API-Key", fmt.Sprintf("key-%d", z.Uint64()))
	}
	for _, top := range []bool{false, true} {
		b.Run(fmt.Sprintf("top=%s", map[bool]string{false: "off", true: "on"}[top]), func(b *testing.B) {
			store := memstore.New(memstore.Options{})
			defer store.Close()
			obs := newObserver(newMetrics(prometheus.NewRegistry(), "memory"), "memory", slog.New(slog.NewTextHandler(io.Discard, nil)), 10)
			rule := httplimit.Rule{Name: "api", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")},
				Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 100, Period: time.Minute}}
			lim, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{rule}, Observer: obs, Headers: httplimit.HeadersNone})
			if err != nil {
				b.Fatal(err)
			}
			if top {
				obs.top = map[string]*topk.Sketch{"api": topk.New(time.Now())}
			}
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%clients])
				i++
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so that the
// benchmark measures the decision rather than a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkObserve is the part of the decision path the heavy hitters
// change: the observer's work for one decided request (its metrics, and
// with top=on the sketch), without the rest of the request, whose noise
// would hide a difference of tens of nanoseconds on a busy machine.
func BenchmarkObserve(b *testing.B) {
	const clients = 4096
	z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, clients-1)
	events := make([]httplimit.Event, clients)
	for i := range events {
		out := httplimit.OutcomeAllowed
		if i%10 == 0 {
			out = httplimit.OutcomeLimited
		}
		events[i] = httplimit.Event{Outcome: out, Latency: time.Microsecond, Rules: []httplimit.RuleEvent{
			{Rule: "api", Action: httplimit.Reject, Outcome: out, Key: fmt.Sprintf("h9:key-%04d", z.Uint64()),
				Decision: sluice.Decision{Allowed: out == httplimit.OutcomeAllowed, Limit: 100}}}}
	}
	r := httptest.NewRequest("GET", "/api", nil)
	for _, top := range []bool{false, true} {
		b.Run(fmt.Sprintf("top=%s", map[bool]string{false: "off", true: "on"}[top]), func(b *testing.B) {
			obs := newObserver(newMetrics(prometheus.NewRegistry(), "memory"), "memory", slog.New(slog.NewTextHandler(io.Discard, nil)), 0)
			if top {
				obs.top = map[string]*topk.Sketch{"api": topk.New(time.Now())}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				obs.Observe(r, &events[i%clients])
				i++
			}
		})
	}
}
