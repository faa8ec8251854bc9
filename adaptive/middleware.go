package adaptive

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/problem"
)

// MiddlewareOptions configure Middleware. The zero value puts every
// request in the Default class and observes nothing.
type MiddlewareOptions struct {
	// Class returns a request's class. It must be fast and safe for
	// concurrent use, and read only what a client cannot forge: a header
	// a trusted layer in front sets (and removes from clients' requests),
	// a verified token's claim, the route. Default: every request is
	// Default.
	Class func(r *http.Request) Class
	// Observe, if set, is told every request's Admission, before the
	// request is served or shed, from the request's goroutine; a request
	// whose client went away while it waited is observed too (not
	// Admitted, Reason NotShed). It must be fast and safe for concurrent
	// use.
	Observe func(r *http.Request, a Admission)
}

// Middleware returns middleware that admits requests under l: an admitted
// request holds a slot while the next handler runs (see Serve); a shed
// one is answered 503 Service Unavailable with Retry-After and a problem
// document of type temporary-reduced-capacity (not 429: the client did
// nothing wrong); a request whose client goes away while it waits gets no
// answer.
func Middleware(l *Limiter, o MiddlewareOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := Default
			if o.Class != nil {
				c = o.Class(r)
			}
			s, adm, err := l.Acquire(r.Context(), c)
			if o.Observe != nil {
				o.Observe(r, adm)
			}
			switch {
			case err != nil:
				return // the client left
			case !adm.Admitted:
				WriteShed(w, adm)
				return
			}
			Serve(s, next, w, r)
		})
	}
}

// WriteShed answers a shed request: 503 Service Unavailable with
// Retry-After (a's RetryAfter, in whole seconds, at least 1) and a
// problem document of type temporary-reduced-capacity.
func WriteShed(w http.ResponseWriter, a Admission) {
	problem.Unavailable(w, engine.CeilSeconds(a.RetryAfter), "The service is overloaded and shed this request")
}

// Serve runs next for r while s holds its slot, and releases the slot
// when next returns or panics. The latency sample is taken when the
// response's status is known (WriteHeader with a final status, or the
// first Write or Flush), with the status's OutcomeOf, or Ignored when r's
// context has ended by then (the client went away, and what the handler
// answers says nothing of the upstream); a handler that returns without
// writing answered 200, one that panics before it wrote says nothing
// (Ignored).
func Serve(s *Slot, next http.Handler, w http.ResponseWriter, r *http.Request) {
	sw := &slotWriter{ResponseWriter: w, s: s, r: r}
	panicked := true
	defer func() { sw.release(panicked) }()
	next.ServeHTTP(sw, r)
	panicked = false
}

// slotWriter takes its slot's sample when the response's status is
// known.
type slotWriter struct {
	http.ResponseWriter
	s        *Slot
	r        *http.Request
	recorded bool
}

func (w *slotWriter) outcome(code int) Outcome {
	if w.r.Context().Err() != nil {
		return Ignored
	}
	return OutcomeOf(code)
}

func (w *slotWriter) record(code int) {
	if !w.recorded {
		w.recorded = true
		w.s.Record(w.outcome(code))
	}
}

func (w *slotWriter) release(panicked bool) {
	o := Ignored // recorded already, or nothing to record
	if !w.recorded && !panicked {
		o = w.outcome(http.StatusOK)
	}
	w.recorded = true
	w.s.Release(context.WithoutCancel(w.r.Context()), o)
}

// WriteHeader records on a final status (200 and above, or 101 Switching
// Protocols); informational statuses pass through.
func (w *slotWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.record(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *slotWriter) Write(b []byte) (int, error) {
	w.record(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush records a 200 if no status was written, then flushes.
func (w *slotWriter) Flush() {
	w.record(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (w *slotWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
