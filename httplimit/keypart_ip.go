package httplimit

import (
	"fmt"
	"net/netip"
)

// SourceIP is the "ip" key part: the client's address, as Options.ClientIP
// finds it (behind trusted proxies, the forwarded address), masked per
// clientip.Options in keys (IPv6 clients per /64 by default).
const SourceIP Source = 1

// IP is the key part of the client's address.
func IP() KeyPart { return KeyPart{Source: SourceIP} }

func init() {
	register(SourceIP, &keySource{
		name: "ip",
		tag:  'i',
		value: func(q *request, _ string) (string, bool) {
			if a := q.clientAddr(); a.IsValid() {
				return a.String(), true
			}
			return "", false
		},
		appendKey: func(q *request, dst []byte) []byte {
			if a := q.clientAddr(); a.IsValid() {
				// Rules keyed by ip are common: the key's text is made once
				// per request.
				if len(q.ipKey) == 0 {
					q.ipKey = q.l.ip.Key(a).AppendTo(append(q.ipKeyBuf[:0], 'i'))
				}
				return append(dst, q.ipKey...)
			}
			// No usable connection address (a Unix socket, say): key by
			// what there is, so such requests still share a bounded
			// counter.
			return appendValue(dst, 'u', q.r.RemoteAddr)
		},
		given: func(l *Limiter, dst []byte, v string) ([]byte, error) {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return dst, fmt.Errorf("%w: %q is not an IP address", ErrInvalidKey, v)
			}
			return l.ip.Key(a).AppendTo(append(dst, 'i')), nil
		},
		notList: "use the list's addresses",
	})
}
