// Package clientip finds the address of the client behind an HTTP request,
// for limiting per client, without letting the client choose it.
//
// # Trust model
//
// The client is the connection's peer (Request.RemoteAddr) unless the peer
// is one of the configured trusted proxies. Only then is the forwarding
// header the proxies write (X-Forwarded-For by default; or Forwarded, RFC
// 7239; or X-Real-IP) believed, and only as far as the proxies wrote it:
// Resolver walks the header's addresses from the right, skipping trusted
// proxies, and takes the first address that is not one. Everything left of
// that address was written by the client itself and is ignored. A client
// therefore never chooses its own address: headers from an untrusted peer
// are ignored entirely, and a client behind a trusted proxy can only add
// entries to the left of the one its proxy appended.
//
// If the first untrusted entry is malformed, obfuscated ("_hidden") or
// "unknown", nothing left of it can be trusted either: the client is then
// the nearest trusted hop, the last address a trusted proxy vouched for.
//
// # Keys
//
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) count as IPv4. Key masks an
// address to IPv4Prefix (default 32) or IPv6Prefix (default 64) bits: an
// IPv6 host usually holds a whole /64 and could otherwise use a fresh
// address for every request.
//
// A Resolver is immutable and safe for concurrent use.
package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// MaxHops is the most forwarding entries Resolver examines, from the right.
// A longer chain is treated as if its next entry were malformed, so a
// megabyte of header costs no more than 32 entries.
const MaxHops = 32

var (
	// ErrInvalidOptions reports Options that cannot work.
	ErrInvalidOptions = errors.New("clientip: invalid options")
	// ErrNoAddr reports a request whose RemoteAddr holds no IP address
	// (a Unix socket, say).
	ErrNoAddr = errors.New("clientip: no client address")
)

// Options configure a Resolver. The zero value believes no forwarding
// header and masks IPv6 clients to /64.
type Options struct {
	// TrustedProxies are the networks whose forwarding headers are
	// believed. Default none.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies write:
	// "X-Forwarded-For" (default), "Forwarded" or "X-Real-IP", in any case.
	Header string
	// IPv4Prefix is the length of the prefix that identifies an IPv4
	// client, 1 to 32. Default 32.
	IPv4Prefix int
	// IPv6Prefix is the length of the prefix that identifies an IPv6
	// client, 1 to 128. Default 64.
	IPv6Prefix int
}

type headerKind uint8

const (
	xForwardedFor headerKind = iota
	forwarded
	xRealIP
)

// Resolver finds clients' addresses. Build one with New.
type Resolver struct {
	trusted []netip.Prefix
	header  string // canonical
	kind    headerKind
	v4, v6  int
}

// New validates opts and returns a Resolver.
func New(opts Options) (*Resolver, error) {
	r := &Resolver{v4: opts.IPv4Prefix, v6: opts.IPv6Prefix}
	if r.v4 == 0 {
		r.v4 = 32
	}
	if r.v6 == 0 {
		r.v6 = 64
	}
	if r.v4 < 1 || r.v4 > 32 {
		return nil, fmt.Errorf("%w: IPv4 prefix length %d: want 1 to 32", ErrInvalidOptions, opts.IPv4Prefix)
	}
	if r.v6 < 1 || r.v6 > 128 {
		return nil, fmt.Errorf("%w: IPv6 prefix length %d: want 1 to 128", ErrInvalidOptions, opts.IPv6Prefix)
	}
	switch strings.ToLower(opts.Header) {
	case "", "x-forwarded-for":
		r.header, r.kind = "X-Forwarded-For", xForwardedFor
	case "forwarded":
		r.header, r.kind = "Forwarded", forwarded
	case "x-real-ip":
		r.header, r.kind = "X-Real-Ip", xRealIP
	default:
		return nil, fmt.Errorf("%w: forwarding header %q: want X-Forwarded-For, Forwarded or X-Real-IP", ErrInvalidOptions, opts.Header)
	}
	for _, p := range opts.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: invalid trusted proxy prefix", ErrInvalidOptions)
		}
		r.trusted = append(r.trusted, unmapPrefix(p).Masked())
	}
	return r, nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96).
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// ParsePrefixes parses CIDRs ("10.0.0.0/8", "2001:db8::/32") and bare
// addresses (a /32 or /128), as configuration files list trusted proxies.
// The error names the first bad entry.
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ss))
	for i, s := range ss {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%w: entry %d %q is not a CIDR or an IP address", ErrInvalidOptions, i, s)
		}
		out = append(out, unmapPrefix(p).Masked())
	}
	return out, nil
}

// Trusted reports whether a is inside one of the trusted proxy networks.
func (r *Resolver) Trusted(a netip.Addr) bool { return r.isTrusted(a.Unmap()) }

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address: the connection's peer, or, when the
// peer is a trusted proxy, the first untrusted address of the forwarding
// header from the right (see the package documentation). The address is
// unmapped (IPv4-mapped IPv6 becomes IPv4) and has no zone.
func (r *Resolver) Addr(req *http.Request) (netip.Addr, error) {
	peer, ok := parseHostPort(req.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q", ErrNoAddr, req.RemoteAddr)
	}
	if len(r.trusted) == 0 || !r.isTrusted(peer) {
		return peer, nil
	}
	lines := req.Header[r.header]
	client := peer // the nearest trusted hop so far
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		if r.kind == xRealIP {
			// X-Real-IP holds one address, written by the proxy.
			a, ok := parseHostPort(strings.TrimSpace(line))
			if !ok {
				return client, nil
			}
			return a, nil
		}
		for line != "" {
			var elem string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				elem, line = line[j+1:], line[:j]
			} else {
				elem, line = line, ""
			}
			elem = strings.TrimSpace(elem)
			if elem == "" {
				continue // empty list members are allowed by the list syntax
			}
			hops++
			if hops > MaxHops {
				return client, nil
			}
			var a netip.Addr
			var ok bool
			if r.kind == forwarded {
				a, ok = forwardedFor(elem)
			} else {
				a, ok = parseHostPort(elem)
			}
			if !ok {
				return client, nil
			}
			if !r.isTrusted(a) {
				return a, nil
			}
			client = a
		}
	}
	return client, nil
}

// Key returns the prefix that identifies the client at a: the address
// masked to IPv4Prefix or IPv6Prefix bits.
func (r *Resolver) Key(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	bits := r.v4
	if a.Is6() {
		bits = r.v6
	}
	p, _ := a.Prefix(bits) // bits is within range for the address family
	return p
}

// AppendKey appends the text form of the request's client key, such as
// "192.0.2.1/32" or "2001:db8:1:2::/64", to dst. It does not allocate when
// dst has room.
func (r *Resolver) AppendKey(dst []byte, req *http.Request) ([]byte, error) {
	a, err := r.Addr(req)
	if err != nil {
		return dst, err
	}
	return r.Key(a).AppendTo(dst), nil
}

// Header returns the canonical name of the forwarding header believed from
// trusted proxies.
func (r *Resolver) Header() string { return textproto.CanonicalMIMEHeaderKey(r.header) }

// parseHostPort parses "1.2.3.4", "1.2.3.4:80", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:80", unmapped and without zone.
func parseHostPort(s string) (netip.Addr, bool) {
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" && (rest[0] != ':' || !isPort(rest[1:])) {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 with a port. (Several colons: bare IPv6.)
		if !isPort(s[i+1:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	if a, ok := parseIPv4(host); ok {
		return a, true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseIPv4 parses a dotted-decimal IPv4 address as netip.ParseAddr does
// (four fields of 0 to 255, no leading zeros), more cheaply than it:
// every request's address is parsed. It reports false for anything else,
// which netip.ParseAddr then decides.
func parseIPv4(s string) (netip.Addr, bool) {
	var ip [4]byte
	field, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			if digits == 1 && val == 0 {
				return netip.Addr{}, false // a leading zero
			}
			if val = val*10 + int(c-'0'); val > 255 {
				return netip.Addr{}, false
			}
			digits++
		case c == '.' && digits > 0 && field < 3:
			ip[field] = byte(val)
			field, val, digits = field+1, 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if field != 3 || digits == 0 {
		return netip.Addr{}, false
	}
	ip[3] = byte(val)
	return netip.AddrFrom4(ip), true
}

func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// forwardedFor returns the address of the for= parameter of one Forwarded
// element ("for=192.0.2.1;proto=https", `For="[2001:db8::1]:80"`). A
// missing, obfuscated or unknown for= is not an address.
func forwardedFor(elem string) (netip.Addr, bool) {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if strings.Contains(value, `\`) {
			return netip.Addr{}, false // quoted-pairs have no place in an address
		}
		if !strings.HasPrefix(value, "[") && strings.Count(value, ":") > 1 {
			return netip.Addr{}, false // RFC 7239 requires IPv6 in brackets
		}
		return parseHostPort(value)
	}
	return netip.Addr{}, false
}
