package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// Source names where a part of a rule's key, or a request's tier, comes from.
type Source uint8

// The sources, by the names used in configuration files.
const (
	SourceIP     Source = iota + 1 // "ip": the client's address, masked per clientip.Options
	SourceHeader                   // "header:NAME": the first value of a request header
	SourceQuery                    // "query:NAME": the first value of a URL query parameter
	SourceCookie                   // "cookie:NAME": the value of a cookie
	SourceMethod                   // "method": the request method
	SourcePath                     // "path": the URL path as rules match it: cleaned, and lower-cased unless Options.CaseSensitivePaths
	SourceHost                     // "host": the Host header without its port, lower-cased
	SourceGlobal                   // "global": one key shared by every request
	SourceJWT                      // "jwt:CLAIM": a claim of the request's verified bearer token (Options.Identity)
)

var sourceNames = [...]string{SourceIP: "ip", SourceHeader: "header", SourceQuery: "query", SourceCookie: "cookie",
	SourceMethod: "method", SourcePath: "path", SourceHost: "host", SourceGlobal: "global", SourceJWT: "jwt"}

// ErrInvalidRule reports a rule, key part or option that can never work.
// Errors wrapping it name the offending value.
var ErrInvalidRule = errors.New("httplimit: invalid rule")

// KeyPart is one part of a rule's composite key, such as the client's IP or
// the X-API-Key header. Build one with ParseKeyPart or the IP, Header, Query,
// Cookie, Method, Path, Host, Global and JWT functions.
type KeyPart struct {
	Source Source
	// Name is the header, query parameter, cookie or claim name; empty
	// for the other sources. Header names are kept in canonical form.
	Name string
}

// Key part constructors, for rules built in code.
func IP() KeyPart { return KeyPart{Source: SourceIP} }
func Header(name string) KeyPart {
	return KeyPart{Source: SourceHeader, Name: textproto.CanonicalMIMEHeaderKey(name)}
}
func Query(name string) KeyPart  { return KeyPart{Source: SourceQuery, Name: name} }
func Cookie(name string) KeyPart { return KeyPart{Source: SourceCookie, Name: name} }
func Method() KeyPart            { return KeyPart{Source: SourceMethod} }
func Path() KeyPart              { return KeyPart{Source: SourcePath} }
func Host() KeyPart              { return KeyPart{Source: SourceHost} }
func Global() KeyPart            { return KeyPart{Source: SourceGlobal} }

// JWT is the key part of a claim of the request's verified bearer token,
// such as JWT("sub"): see Options.Identity. A request without a token that
// verifies, or whose token lacks the claim (or holds an array or object
// there), does not have it.
func JWT(claim string) KeyPart { return KeyPart{Source: SourceJWT, Name: claim} }

// ParseKeyPart parses the configuration form of a key part: "ip",
// "header:NAME", "query:NAME", "cookie:NAME", "method", "path", "host",
// "global" or "jwt:CLAIM". Source names are case-insensitive; claim names
// are not.
func ParseKeyPart(s string) (KeyPart, error) {
	src, name, hasName := strings.Cut(s, ":")
	for i, n := range sourceNames {
		if i == 0 || !strings.EqualFold(src, n) {
			continue
		}
		k := KeyPart{Source: Source(i), Name: name}
		named := k.Source == SourceHeader || k.Source == SourceQuery || k.Source == SourceCookie || k.Source == SourceJWT
		switch {
		case named && (!hasName || name == ""):
			return KeyPart{}, fmt.Errorf("%w: key part %q needs a name, as in %q", ErrInvalidRule, s, n+":NAME")
		case !named && hasName:
			return KeyPart{}, fmt.Errorf("%w: key part %q takes no name; write %q", ErrInvalidRule, s, n)
		}
		if err := k.validate(); err != nil {
			return KeyPart{}, err
		}
		if k.Source == SourceHeader {
			k.Name = textproto.CanonicalMIMEHeaderKey(name)
		}
		return k, nil
	}
	return KeyPart{}, fmt.Errorf("%w: unknown key part %q (want ip, header:NAME, query:NAME, cookie:NAME, method, path, host, global or jwt:CLAIM)", ErrInvalidRule, s)
}

func (k KeyPart) validate() error {
	switch k.Source {
	case SourceHeader, SourceCookie:
		if k.Name == "" || !isToken(k.Name) {
			return fmt.Errorf("%w: %s name %q is not a valid HTTP token", ErrInvalidRule, sourceNames[k.Source], k.Name)
		}
	case SourceQuery:
		if k.Name == "" || len(k.Name) > 256 {
			return fmt.Errorf("%w: query parameter name %q must be 1 to 256 bytes", ErrInvalidRule, k.Name)
		}
	case SourceJWT:
		if k.Name == "" || len(k.Name) > 256 || strings.ContainsFunc(k.Name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return fmt.Errorf("%w: claim name %q must be 1 to 256 bytes without control characters", ErrInvalidRule, k.Name)
		}
	case SourceIP, SourceMethod, SourcePath, SourceHost, SourceGlobal:
		if k.Name != "" {
			return fmt.Errorf("%w: key part %s takes no name", ErrInvalidRule, sourceNames[k.Source])
		}
	default:
		return fmt.Errorf("%w: key part with unknown source %d", ErrInvalidRule, k.Source)
	}
	return nil
}

// String returns the configuration form, such as "header:X-Api-Key".
func (k KeyPart) String() string {
	if int(k.Source) >= len(sourceNames) || k.Source == 0 {
		return fmt.Sprintf("source(%d)", k.Source)
	}
	if k.Name != "" {
		return sourceNames[k.Source] + ":" + k.Name
	}
	return sourceNames[k.Source]
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return s != ""
}

// MaxValueLen is the longest header, query or cookie value used in a key as
// it is. Longer values are replaced by a SHA-256 digest, so that a client
// cannot make keys (and Redis key names) arbitrarily large.
const MaxValueLen = 128

// value returns the request's value for a named or request-derived part and
// whether the request has it. The IP part is handled by the caller.
func (k KeyPart) value(r *http.Request) (string, bool) {
	switch k.Source {
	case SourceHeader:
		v := r.Header[k.Name]
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return v[0], true
	case SourceQuery:
		return queryValue(r.URL.RawQuery, k.Name)
	case SourceCookie:
		c, err := r.Cookie(k.Name)
		if err != nil || c.Value == "" {
			return "", false
		}
		return c.Value, true
	case SourceMethod:
		return r.Method, true
	case SourcePath:
		return r.URL.Path, true
	case SourceHost:
		return hostOf(r), true
	case SourceGlobal:
		return "", true
	}
	return "", false
}

// queryValue returns the first value of parameter name in a raw query
// without parsing (and allocating for) the whole query.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			uk, err := url.QueryUnescape(k)
			if err != nil || uk != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				return "", false
			}
			v = uv
		}
		if v == "" {
			return "", false
		}
		return v, true
	}
	return "", false
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

// appendValue appends one key part to a composite key: a tag byte, the
// value's length, a colon and the value, so that parts never run into each other ("a:b"+"c" differs from
// "a"+"b:c"). Values longer than MaxValueLen are replaced by their digest.
func appendValue(dst []byte, tag byte, v string) []byte {
	if len(v) > MaxValueLen {
		sum := sha256.Sum256([]byte(v))
		dst = append(dst, tag, '#')
		return base64.RawURLEncoding.AppendEncode(dst, sum[:18])
	}
	dst = append(dst, tag)
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	dst = append(dst, ':')
	return append(dst, v...)
}
