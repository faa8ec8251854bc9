package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/problem"
)

// ConcurrencyOptions configure Concurrent. The zero value limits every
// request under one key, answers 429 at once when no slot is free, sends
// the IETF headers and answers 503 when the store fails.
type ConcurrencyOptions struct {
	// Key returns the key a request is limited under and whether it is
	// limited at all (false serves it without a slot). Default: every
	// request under the key "", a limit on the whole handler.
	Key func(r *http.Request) (string, bool)
	// MaxDelay is how long a request waits for a free slot before it is
	// answered 429 (a release frees one sooner than a lease expires, so
	// the wait polls every Poll). Default zero: answer at once.
	MaxDelay time.Duration
	// Poll is how often a waiting request asks again. Default 50ms.
	Poll time.Duration
	// Headers selects the rate-limit headers. Default HeadersIETF.
	Headers Headers
	// FailOpen serves a request without a slot when the store cannot
	// decide; by default such a request is answered 503.
	FailOpen bool
}

// Concurrent returns middleware that serves at most c.Limit() requests at
// once per key: a request holds a lease of c while the next handler runs
// and releases it when the handler returns (or panics). A request that
// finds no free slot, within MaxDelay, is answered 429 Too Many Requests
// with Retry-After (the time until the earliest lease held expires by
// itself, at least a second) and problem details. Leases outlive the
// handler only when the process dies, and then by at most c's lease
// timeout; choose it longer than the slowest response.
//
// With HeadersIETF, responses carry RateLimit-Policy with
// qu="concurrent-requests" and RateLimit with r, the free slots after the
// request took its own (and t, the retry time, on a 429). A request whose
// client leaves while it waits for a slot is not served and gets no
// answer. It is safe for concurrent use.
func Concurrent(c *sluice.Concurrency, opts ConcurrencyOptions) func(http.Handler) http.Handler {
	if opts.Headers == 0 {
		opts.Headers = HeadersIETF
	}
	if opts.Poll <= 0 {
		opts.Poll = 50 * time.Millisecond
	}
	policy := string(engine.AppendString(nil, c.Name())) + ";q=" + strconv.FormatInt(c.Limit(), 10) + `;qu="concurrent-requests"`
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := ""
			if opts.Key != nil {
				k, ok := opts.Key(r)
				if !ok {
					next.ServeHTTP(w, r)
					return
				}
				key = k
			}
			var (
				l   *sluice.Lease
				d   sluice.Decision
				err error
			)
			if opts.MaxDelay > 0 {
				l, d, err = c.Wait(r.Context(), key, opts.MaxDelay, opts.Poll)
				if err != nil && r.Context().Err() != nil {
					return // the client left
				}
			} else {
				l, d, err = c.Acquire(context.WithoutCancel(r.Context()), key)
			}
			// A refusal from a store that fails closed (redisstore's
			// OnError Deny) is a failure, not a full limit.
			failed := err != nil || (!d.Allowed && d.Degraded && failsClosed(c))
			switch {
			case failed && opts.FailOpen:
				next.ServeHTTP(w, r)
				return
			case failed:
				unavailableConcurrency(w)
				return
			}
			h := w.Header()
			if opts.Headers&HeadersIETF != 0 {
				h[engine.KeyRateLimitPolicy] = []string{policy}
				b := engine.AppendString(nil, c.Name())
				b = append(b, ";r="...)
				b = strconv.AppendInt(b, d.Remaining, 10)
				if !d.Allowed {
					b = append(b, ";t="...)
					b = strconv.AppendInt(b, max(engine.CeilSeconds(d.RetryAfter), 1), 10)
				}
				h[engine.KeyRateLimit] = []string{string(b)}
			}
			if opts.Headers&HeadersLegacy != 0 {
				h[engine.KeyLimit] = []string{strconv.FormatInt(d.Limit, 10)}
				h[engine.KeyRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
			}
			if !d.Allowed {
				tooManyConcurrent(w, c.Name(), d.RetryAfter)
				return
			}
			defer l.Release(context.WithoutCancel(r.Context())) // expires by itself if this fails
			next.ServeHTTP(w, r)
		})
	}
}

// tooManyConcurrent answers 429 for a concurrency limit named name.
func tooManyConcurrent(w http.ResponseWriter, name string, retry time.Duration) {
	secs := max(engine.CeilSeconds(retry), 1)
	h := w.Header()
	h[engine.KeyRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	b := []byte(`{"type":"` + ProblemType + `","title":"Too Many Requests","status":429,"detail":"Too many concurrent requests; retry after `)
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"violated-policies":[`...)
	b = engine.AppendString(b, name)
	b = append(b, `],"retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, "}\n"...)
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(b)
}

// unavailableConcurrency answers 503 when the store could not decide.
func unavailableConcurrency(w http.ResponseWriter) {
	problem.Unavailable(w, 1, "The concurrency limiter cannot decide")
}

// failsClosed reports whether c's store refuses when its backend fails.
func failsClosed(c *sluice.Concurrency) bool {
	fc, ok := c.Store().(sluice.ClosedFailer)
	return ok && fc.FailsClosed()
}
