package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/calendar"
)

// Source names where a part of a rule's key, a request's tier or a list's
// key comes from. The sources are defined one per file (keypart_*.go),
// each with its constant, its constructor and everything the Limiter knows
// of it; a new source is one more such file.
type Source uint8

// ErrInvalidRule reports a rule, key part or option that can never work.
// Errors wrapping it name the offending value.
var ErrInvalidRule = errors.New("httplimit: invalid rule")

// KeyPart is one part of a rule's composite key, such as the client's IP or
// the X-API-Key header. Build one with ParseKeyPart or the IP, Header,
// Query, Cookie, Method, Path, Host, Global and JWT functions.
type KeyPart struct {
	Source Source
	// Name is the header, query parameter, cookie or claim name; empty
	// for the other sources. Header names are kept in canonical form.
	Name string
}

// keySource is everything the Limiter knows of one source of key parts.
type keySource struct {
	name  string // its configuration name, such as "header"
	tag   byte   // marks its values in composite keys; unique per source
	named bool   // it takes a name: "header:NAME"
	// checkName reports why a name cannot be used, or nil. Named sources
	// only.
	checkName func(name string) error
	// canonical, if set, returns the name as it is kept.
	canonical func(name string) string
	// value returns the request's value of the part (named name) and
	// whether the request has one.
	value func(q *request, name string) (string, bool)
	// appendKey, if set, appends the part's form in a composite key
	// (from its tag on) in place of appendValue of its value.
	appendKey func(q *request, dst []byte) []byte
	// given, if set, turns a value an operator gives for the part (see
	// Limiter.RuleKey) into its form in a composite key, appended to dst;
	// by default a value is used as a request would carry it, and must not
	// be empty.
	given func(l *Limiter, dst []byte, v string) ([]byte, error)
	// noValue: the part takes no value (RuleKey asks none for it).
	noValue bool
	// notTier and notList: the part cannot name tiers or clients, or key
	// an allow or deny list, each with the reason.
	notTier, notList string
}

// sources holds the key sources by Source, filled by each source's file.
var sources [16]*keySource

// register adds the source s. It is called by the sources' files when the
// package is initialised; a clash is a programming error.
func register(s Source, ks *keySource) {
	if s == 0 || int(s) >= len(sources) || sources[s] != nil {
		panic(fmt.Sprintf("httplimit: key source %d (%s) registered twice or out of range", s, ks.name))
	}
	for _, o := range sources {
		if o != nil && (o.tag == ks.tag || o.name == ks.name) {
			panic(fmt.Sprintf("httplimit: key sources %s and %s share a name or tag", o.name, ks.name))
		}
	}
	sources[s] = ks
}

// source returns the source of k, or nil for an unknown one.
func (k KeyPart) source() *keySource {
	if int(k.Source) >= len(sources) {
		return nil
	}
	return sources[k.Source]
}

// request is a request as the Limiter reads it: the request, the path as
// rules see it, and what it finds about the client (its address, tier,
// override, token's claims and billing anchor), each at most once.
type request struct {
	l    *Limiter
	r    *http.Request
	path string // cleaned, and lower-cased unless paths are case-sensitive

	addrDone bool
	addr     netip.Addr // invalid when the client has no usable address
	// ipKey is the ip key part's form, once made (in ipKeyBuf).
	ipKey    []byte
	ipKeyBuf [48]byte

	tierDone bool
	tier     string
	ov       *ClientOverride

	verified bool              // claims holds Identity.Claims
	claims   map[string]string // nil without a verified token

	anchorDone, hasAnchor bool // the request's billing anchor (Tiers.Anchor)
	anchor                calendar.Anchor
}

// newRequest returns r as the Limiter reads it.
func (l *Limiter) newRequest(r *http.Request) request {
	return request{l: l, r: r, path: l.matchPath(r)}
}

// clientAddr returns the request's client address, found once; the zero
// Addr when it has no usable one.
func (q *request) clientAddr() netip.Addr {
	if !q.addrDone {
		q.addrDone = true
		q.addr, _ = q.l.ip.Addr(q.r)
	}
	return q.addr
}

// ParseKeyPart parses the configuration form of a key part, such as "ip",
// "header:NAME" or "jwt:CLAIM" (every source's name, with a name where it
// takes one). Source names are case-insensitive; the names after them are
// kept as written, but for headers, which are kept in canonical form.
func ParseKeyPart(s string) (KeyPart, error) {
	src, name, hasName := strings.Cut(s, ":")
	for i, ks := range sources {
		if ks == nil || !strings.EqualFold(src, ks.name) {
			continue
		}
		switch {
		case ks.named && (!hasName || name == ""):
			return KeyPart{}, fmt.Errorf("%w: key part %q needs a name, as in %q", ErrInvalidRule, s, ks.name+":NAME")
		case !ks.named && hasName:
			return KeyPart{}, fmt.Errorf("%w: key part %q takes no name; write %q", ErrInvalidRule, s, ks.name)
		}
		k := KeyPart{Source: Source(i), Name: name}
		if err := k.validate(); err != nil {
			return KeyPart{}, err
		}
		if ks.canonical != nil {
			k.Name = ks.canonical(name)
		}
		return k, nil
	}
	return KeyPart{}, fmt.Errorf("%w: unknown key part %q (want %s)", ErrInvalidRule, s, sourceList())
}

// sourceList names every source in its configuration form, for errors.
func sourceList() string {
	var names []string
	for _, ks := range sources {
		switch {
		case ks == nil:
		case ks.named && ks.name == "jwt":
			names = append(names, ks.name+":CLAIM")
		case ks.named:
			names = append(names, ks.name+":NAME")
		default:
			names = append(names, ks.name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (k KeyPart) validate() error {
	ks := k.source()
	switch {
	case ks == nil:
		return fmt.Errorf("%w: key part with unknown source %d", ErrInvalidRule, k.Source)
	case !ks.named && k.Name != "":
		return fmt.Errorf("%w: key part %s takes no name", ErrInvalidRule, ks.name)
	case ks.named:
		if err := ks.checkName(k.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRule, err)
		}
	}
	return nil
}

// String returns the configuration form, such as "header:X-Api-Key".
func (k KeyPart) String() string {
	ks := k.source()
	switch {
	case ks == nil:
		return fmt.Sprintf("source(%d)", k.Source)
	case k.Name != "":
		return ks.name + ":" + k.Name
	}
	return ks.name
}

// value returns the request's value of k and whether it has one.
func (k KeyPart) value(q *request) (string, bool) {
	return sources[k.Source].value(q, k.Name)
}

// appendKey appends k's form in a composite key for the request, and
// reports whether the request has a value for it.
func (k KeyPart) appendKey(q *request, dst []byte) ([]byte, bool) {
	ks := sources[k.Source]
	if ks.appendKey != nil {
		return ks.appendKey(q, dst), true
	}
	v, ok := ks.value(q, k.Name)
	if !ok {
		return dst, false
	}
	return appendValue(dst, ks.tag, v), true
}

// appendGiven appends k's form in a composite key for the value v an
// operator gives (see Limiter.RuleKey).
func (k KeyPart) appendGiven(l *Limiter, dst []byte, v string) ([]byte, error) {
	ks := sources[k.Source]
	switch {
	case ks.given != nil:
		return ks.given(l, dst, v)
	case ks.noValue:
		return appendValue(dst, ks.tag, ""), nil
	case v == "":
		return dst, errEmptyValue(k)
	}
	return appendValue(dst, ks.tag, v), nil
}

// errEmptyValue is the error of an empty value an operator gives for k.
func errEmptyValue(k KeyPart) error {
	return fmt.Errorf("%w: empty value for %s (a request without it is keyed by its IP, or skipped)", ErrInvalidKey, k)
}

// checkToken reports why name cannot be a header or cookie name, or nil.
func checkToken(kind string) func(string) error {
	return func(name string) error {
		if !isToken(name) {
			return fmt.Errorf("%s name %q is not a valid HTTP token", kind, name)
		}
		return nil
	}
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

// appendValue appends one key part to a composite key: a tag byte, the
// value's length, a colon and the value, so that parts never run into each
// other ("a:b"+"c" differs from "a"+"b:c"). Values longer than MaxValueLen
// are replaced by their digest.
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
