package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/problem"
)

// Header names, in canonical form.

// ProblemType is the type URI of the 429 problem details, as registered
// for quota errors by draft-ietf-httpapi-ratelimit-headers.
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ProblemTypeUnavailable is the type URI of the 503 problem details sent
// when the store cannot decide and the request is refused: the server's
// capacity is reduced for a while, whatever the client's use of its quota
// ("temporary-reduced-capacity", registered by
// draft-ietf-httpapi-ratelimit-headers).
const ProblemTypeUnavailable = problem.TypeUnavailable

// style is the engine's style of the Limiter's headers.
func (l *Limiter) style() engine.Style {
	var s engine.Style
	if l.headers&HeadersNone == 0 {
		if l.headers&HeadersIETF != 0 {
			s |= engine.IETF
		}
		if l.headers&HeadersLegacy != 0 {
			s |= engine.Legacy
		}
	}
	return s
}

// writeHeaders sets the rate-limit headers of an admitted request for the
// Reject or Delay rule closest to its limit: the fewest units remaining, and
// of those the longest until reset.
func (l *Limiter) writeHeaders(h http.Header, c *call) {
	c.fields = c.eng.Fields(c.fields[:0], engine.Admitted, l.style(), nil, time.Time{})
	setFields(h, c.fields)
}

// setFields sets the fields in h. The values' slices are cut from one
// array: with the one string of Fields, two allocations in all.
func setFields(h http.Header, fields []engine.Field) {
	if len(fields) == 0 {
		return
	}
	vals := make([]string, len(fields))
	for i, f := range fields {
		vals[i] = f.Value
		h[f.Key] = vals[i : i+1 : i+1]
	}
}

// reject answers 429 for the rules that denied the request: the headers
// describe every one of them, the legacy ones the rule that keeps the
// client out longest, and the problem details name them all.
func (l *Limiter) reject(w http.ResponseWriter, c *call) {
	h := w.Header()
	c.fields = c.eng.Fields(c.fields[:0], engine.Refused, l.style()|engine.RetryAfter, nil, time.Time{})
	setFields(h, c.fields)
	secs, ok := c.eng.RetryAfter()
	if !ok {
		secs = 1
	}
	if _, set := h[engine.KeyRetryAfter]; !set {
		h[engine.KeyRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`+ProblemType+`","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry after `...)
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"violated-policies":[`...)
	for n, i := range c.eng.Described() {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, c.eng.Checks[i].Name...)
		b = append(b, '"')
	}
	b = append(b, `],"retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, "}\n"...)
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(b)
}

// unavailable answers 503 when the store could not decide and the request
// is refused: the limiter fails closed (Options.FailClosed), or the store
// failed closed by itself. It sends no rate-limit fields, which would tell
// the client it used a quota it did not use. Retry-After is the longest
// wait a store that failed closed asked for (its circuit breaker's
// cooldown), at least 1 second.
func (l *Limiter) unavailable(w http.ResponseWriter, c *call) {
	var retry time.Duration
	for i := range c.events {
		if e := &c.events[i]; errors.Is(e.Err, ErrFailedClosed) {
			retry = max(retry, e.Decision.RetryAfter)
		}
	}
	problem.Unavailable(w, engine.CeilSeconds(retry), "The rate limiter cannot decide")
}
