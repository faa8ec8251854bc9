package httplimit

import (
	"net/http"
	"strings"
)

// SourceHost is the "host" key part: the Host header without its port,
// lower-cased.
const SourceHost Source = 7

// Host is the key part of the request's host.
func Host() KeyPart { return KeyPart{Source: SourceHost} }

func init() {
	register(SourceHost, &keySource{
		name:  "host",
		tag:   's',
		value: func(q *request, _ string) (string, bool) { return hostOf(q.r), true },
		given: func(_ *Limiter, dst []byte, v string) ([]byte, error) {
			if v == "" {
				return dst, errEmptyValue(Host())
			}
			return appendValue(dst, 's', hostOf(&http.Request{Host: v})), nil
		},
	})
}

// hostOf returns the request's host without its port, lower-cased.
func hostOf(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}
