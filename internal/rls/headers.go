package rls

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/engine"
)

// style is the engine's style of the service's headers.
func (h Headers) style() engine.Style {
	if h&HeadersOff != 0 {
		return 0
	}
	var s engine.Style
	for _, m := range []struct {
		h Headers
		s engine.Style
	}{{HeadersIETF, engine.IETF}, {HeadersLegacy, engine.Legacy}, {HeadersEnvoy, engine.Envoy}, {HeadersRetryAfter, engine.RetryAfter}} {
		if h&m.h != 0 {
			s |= m.s
		}
	}
	return s
}

// headers returns the rate-limit headers for the client's response, as the
// gateway writes them (see engine.Call.Fields): an admitted request's
// describe the enforced limit closest to its limit; a rejected one's every
// limit that rejected it, the legacy and envoyproxy/ratelimit ones the
// limit that keeps the client out longest. A request that can never pass
// (a cost beyond a limit's capacity, or a limit of zero requests) gets no
// Retry-After. Shadow limits never show.
func (s *Service) headers(c *call, over bool) []*corev3.HeaderValue {
	v := engine.Admitted
	if over {
		v = engine.Refused
	}
	c.fields = c.eng.Fields(c.fields[:0], v, s.style, s.names, time.Time{})
	if len(c.fields) == 0 {
		return nil
	}
	vals := make([]corev3.HeaderValue, len(c.fields))
	ptrs := make([]*corev3.HeaderValue, len(c.fields))
	for i, f := range c.fields {
		vals[i].Key, vals[i].Value = f.Name, f.Value
		ptrs[i] = &vals[i]
	}
	return ptrs
}

// displayName is a rule's name in rate-limit headers.
func displayName(r *descriptor.Rule) string {
	switch {
	case r.Name != "":
		return r.Name
	case r.MetricKey != "":
		return r.MetricKey
	case r.Policy != nil:
		return r.Policy.Name()
	}
	return r.Domain
}
