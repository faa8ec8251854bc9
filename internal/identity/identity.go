// Package identity verifies the JSON Web Tokens that clients send as
// "Authorization: Bearer <token>", so that a gateway can key limits by the
// token's subject (or any claim) and take a client's tier from a claim
// (plan: premium) without trusting anything the client could forge.
//
// Signatures are checked by github.com/go-jose/go-jose/v4 against keys
// read from PEM or JWKS files (ParseKeys); only the algorithms configured
// are accepted, and each key only for the algorithms of its own type, so
// that "alg": "none" and algorithm confusion (an RSA public key used as an
// HMAC secret) are refused before any signature is checked. The registered
// claims exp, nbf, iss and aud are enforced, with a small leeway for the
// issuer's and the gateway's clocks; exp is required.
//
// Verifying a signature costs tens of microseconds, so a Verifier caches
// what it found for each token (keyed by the token's SHA-256, bounded in
// size) until the token expires: a client sending the same token again
// costs a hash and a map lookup. A client sending new tokens that fail
// their signature check (forged ones) would cost a check each; a
// Verifier bounds how many it checks per client (Options.MaxBadSignatures)
// and treats that client's further new tokens as unverified, Throttled,
// without checking them.
package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// Reason says why a request has no verified identity, or that it has one.
type Reason uint8

// The reasons, with the names used as metric labels.
const (
	Valid         Reason = iota // "valid": the token verified
	Missing                     // "missing": no Authorization: Bearer header
	Malformed                   // "malformed": not a compact JWS, too large, or claims that are not JSON
	BadSignature                // "bad_signature": no key the token may use verifies its signature
	Expired                     // "expired": exp (plus the leeway) has passed
	NotYetValid                 // "not_yet_valid": nbf or iat (less the leeway) is still to come
	WrongIssuer                 // "wrong_issuer": iss is not Options.Issuer
	WrongAudience               // "wrong_audience": aud does not hold Options.Audience
	UnknownKey                  // "unknown_key": no key has the token's kid, or none takes its alg
	AlgNotAllowed               // "alg_not_allowed": alg is not configured (none, say), or not one the named key may use
	NoExpiry                    // "no_expiry": the token has no exp claim
	Throttled                   // "throttled": not checked, the client's new tokens having failed their signature check too often
)

var reasonNames = [...]string{"valid", "missing", "malformed", "bad_signature", "expired", "not_yet_valid",
	"wrong_issuer", "wrong_audience", "unknown_key", "alg_not_allowed", "no_expiry", "throttled"}

// Reasons lists every Reason, for metrics that show each one from the
// start.
func Reasons() []Reason {
	out := make([]Reason, len(reasonNames))
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// String returns the reason's metric label, such as "bad_signature".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Errors of New and ParseKeys; the messages name the offending value.
var (
	ErrInvalidOptions = errors.New("identity: invalid options")
	ErrInvalidKey     = errors.New("identity: invalid key")
)

// Key is one verification key.
type Key struct {
	// ID is the key's kid: a token whose header names a kid is checked
	// only against the keys with that ID. Optional.
	ID string
	// Public is *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey, or a
	// []byte HMAC secret.
	Public any
	// Algorithms, if not empty, restricts the key to these algorithms
	// (a JWK's "alg"); they must suit the key's type.
	Algorithms []string
}

// Options configure a Verifier. Keys and Algorithms are required.
type Options struct {
	// Keys verify the tokens' signatures.
	Keys []Key
	// Algorithms are the signature algorithms accepted, such as RS256,
	// ES256, EdDSA, HS256 (also RS384, RS512, PS256, PS384, PS512, ES384,
	// ES512, HS384, HS512). A key is used only for those of them its
	// type can verify; "none" is never accepted.
	Algorithms []string
	// Issuer, if not empty, must equal the token's iss.
	Issuer string
	// Audience, if not empty, must be one of the token's aud.
	Audience string
	// Leeway is how far exp, nbf and iat may be off, for clock skew
	// between the issuer and the gateway. Default 0; at most 5 minutes.
	Leeway time.Duration
	// MaxTokenBytes bounds a token's length; longer ones are Malformed
	// without being parsed. Default 8 KiB.
	MaxTokenBytes int
	// Claims, if not empty, are the only claims Claims and Verify
	// return (those the rules use), so that the cache keeps no more of
	// each token than it needs.
	Claims []string
	// MaxBadSignatures bounds the signature checks that fail, per client
	// (an IPv4 address, an IPv6 /64; see Claims and VerifyFrom): once a
	// client's new tokens have failed their check at more than this many
	// a second (with a burst of ten seconds' worth), its further new
	// tokens are Throttled without a check until it is back within the
	// rate. Tokens seen before are answered from the cache as ever, and a
	// client's valid tokens verify as usual unless its forged ones exhaust
	// its bound first. The bound's state is in memory, at most 65,536
	// clients (when full, those furthest from their bound make room
	// first). Default 10; negative turns the bound off.
	MaxBadSignatures int
	// CacheSize bounds the tokens whose verification is remembered.
	// Default 50,000: about 25 MB when each keeps two short claims (see
	// Claims), some 50 MB if each keeps a dozen.
	CacheSize int
	// Clock tells the time for exp and nbf. Default clock.Default().
	Clock interface{ Now() time.Time }
	// Observe, if set, is told the outcome for every request that
	// Claims checks (cache hits included), from the request's goroutine:
	// for metrics, so that invalid tokens are counted, not logged.
	Observe func(Reason)
}

// Verifier checks tokens. It is safe for concurrent use; build a new one
// (with a new cache) when the keys change.
type Verifier struct {
	opts   Options
	keys   []key
	byKID  map[string][]int
	all    []int // 0 to len(keys)-1
	algs   []jose.SignatureAlgorithm
	expect jwt.Expected
	cache  cache
	bad    *sluice.Limiter // failed signature checks per client, or nil
}

// key is a Key with the algorithms it may verify.
type key struct {
	id   string
	pub  any
	algs []string
}

// supported lists, for each algorithm, what kind of key verifies it.
var supported = map[string]string{
	"RS256": "RSA", "RS384": "RSA", "RS512": "RSA", "PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
	"ES256": "P-256", "ES384": "P-384", "ES512": "P-521",
	"EdDSA": "Ed25519",
	"HS256": "oct", "HS384": "oct", "HS512": "oct",
}

// minSecret is the shortest HMAC secret accepted for each algorithm: the
// size of its hash (RFC 7518 section 3.2).
var minSecret = map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}

// kindOf names a key's type as supported does.
func kindOf(pub any) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k == nil || k.N == nil || k.N.BitLen() < 2048 {
			return "", fmt.Errorf("%w: an RSA key of fewer than 2048 bits", ErrInvalidKey)
		}
		return "RSA", nil
	case *ecdsa.PublicKey:
		if k == nil {
			break
		}
		switch k.Curve {
		case elliptic.P256():
			return "P-256", nil
		case elliptic.P384():
			return "P-384", nil
		case elliptic.P521():
			return "P-521", nil
		}
		return "", fmt.Errorf("%w: an EC key on an unsupported curve", ErrInvalidKey)
	case ed25519.PublicKey:
		return "Ed25519", nil
	case []byte:
		return "oct", nil
	}
	return "", fmt.Errorf("%w: unsupported key type %T (want an RSA, EC or Ed25519 public key, or an HMAC secret)", ErrInvalidKey, pub)
}

// New validates the options and returns a Verifier.
func New(opts Options) (*Verifier, error) {
	if len(opts.Algorithms) == 0 {
		return nil, fmt.Errorf("%w: no algorithms", ErrInvalidOptions)
	}
	if len(opts.Keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidOptions)
	}
	for _, a := range opts.Algorithms {
		if _, ok := supported[a]; !ok {
			return nil, fmt.Errorf("%w: unsupported algorithm %q (want %s)", ErrInvalidOptions, a, strings.Join(AlgorithmNames(), ", "))
		}
	}
	if opts.Leeway < 0 || opts.Leeway > 5*time.Minute {
		return nil, fmt.Errorf("%w: leeway %v must be 0 to 5m", ErrInvalidOptions, opts.Leeway)
	}
	if opts.MaxTokenBytes <= 0 {
		opts.MaxTokenBytes = 8 << 10
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 50_000
	}
	if opts.Clock == nil {
		opts.Clock = clock.Default()
	}
	v := &Verifier{opts: opts, byKID: map[string][]int{}}
	for _, a := range opts.Algorithms {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	for i, k := range opts.Keys {
		kind, err := kindOf(k.Public)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", keyName(i, k.ID), err)
		}
		for _, a := range k.Algorithms {
			if supported[a] != kind {
				return nil, fmt.Errorf("key %s: %w: algorithm %q cannot be used with a %s key", keyName(i, k.ID), ErrInvalidKey, a, kind)
			}
		}
		kk := key{id: k.ID, pub: k.Public}
		for _, a := range opts.Algorithms {
			if supported[a] != kind || (len(k.Algorithms) > 0 && !slices.Contains(k.Algorithms, a)) {
				continue
			}
			if sec, ok := k.Public.([]byte); ok && len(sec) < minSecret[a] {
				return nil, fmt.Errorf("key %s: %w: an HMAC secret of %d bytes is too short for %s (want at least %d)", keyName(i, k.ID), ErrInvalidKey, len(sec), a, minSecret[a])
			}
			kk.algs = append(kk.algs, a)
		}
		if len(kk.algs) == 0 {
			// A key set published by an identity provider may hold keys
			// for algorithms not accepted here; they are left out.
			continue
		}
		v.byKID[k.ID] = append(v.byKID[k.ID], len(v.keys))
		v.all = append(v.all, len(v.keys))
		v.keys = append(v.keys, kk)
	}
	if len(v.keys) == 0 {
		return nil, fmt.Errorf("%w: no key verifies any of the algorithms configured (%s)", ErrInvalidKey, strings.Join(opts.Algorithms, ", "))
	}
	v.expect = jwt.Expected{Issuer: opts.Issuer}
	if opts.Audience != "" {
		v.expect.AnyAudience = jwt.Audience{opts.Audience}
	}
	v.cache.init(opts.CacheSize)
	if opts.MaxBadSignatures == 0 {
		opts.MaxBadSignatures = 10
		v.opts.MaxBadSignatures = 10
	}
	if n := int64(opts.MaxBadSignatures); n > 0 {
		// No janitor: the store starts no goroutine, so a Verifier needs
		// no Close; its entries expire when evicted or decided again.
		store := memstore.New(memstore.Options{MaxKeys: 1 << 16, Shards: 16, SweepInterval: -1, Clock: opts.Clock})
		lim, err := sluice.New(store, "identity-bad-signatures", sluice.Limit{Algorithm: sluice.GCRA, Count: n, Period: time.Second, Burst: 10 * n})
		if err != nil {
			return nil, fmt.Errorf("%w: MaxBadSignatures %d: %w", ErrInvalidOptions, n, err)
		}
		v.bad = lim
	}
	return v, nil
}

func keyName(i int, id string) string {
	if id != "" {
		return strconv.Quote(id)
	}
	return "#" + strconv.Itoa(i+1)
}

// AlgorithmNames returns the algorithms a Verifier can accept, sorted.
func AlgorithmNames() []string {
	out := make([]string, 0, len(supported))
	for a := range supported {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Claims returns the claims of the request's verified bearer token, or
// nil when it has none that verifies (Options.Observe is told why). Each
// claim whose value is a string, a number or a boolean is given as text
// (numbers as written in the token); arrays, objects and null are left
// out. The map is shared: callers must not modify it. client is the
// request's client address, whose failed signature checks count against
// Options.MaxBadSignatures; the zero Addr (client unknown) is not bounded.
func (v *Verifier) Claims(r *http.Request, client netip.Addr) map[string]string {
	c, why := v.VerifyFrom(bearer(r), client)
	if v.opts.Observe != nil {
		v.opts.Observe(why)
	}
	return c
}

// bearer returns the token of the request's Authorization header, or "".
func bearer(r *http.Request) string {
	h := r.Header["Authorization"]
	if len(h) == 0 {
		return ""
	}
	s := h[0]
	const scheme = "bearer "
	if len(s) < len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(s[len(scheme):])
}

// Verify checks a token and returns its claims (see Claims), or nil and
// the reason it does not verify. An empty token is Missing. It bounds no
// client's failed checks; see VerifyFrom.
func (v *Verifier) Verify(token string) (map[string]string, Reason) {
	return v.VerifyFrom(token, netip.Addr{})
}

// VerifyFrom is Verify for a token that client sent: a token not in the
// cache is Throttled, unchecked, when client's new tokens have failed
// their signature check more often than Options.MaxBadSignatures allows,
// and a failed check counts against client. The zero Addr is not bounded.
func (v *Verifier) VerifyFrom(token string, client netip.Addr) (map[string]string, Reason) {
	if token == "" {
		return nil, Missing
	}
	if len(token) > v.opts.MaxTokenBytes {
		return nil, Malformed
	}
	now := v.opts.Clock.Now()
	sum := digest(token)
	if e, ok := v.cache.get(sum); ok {
		switch {
		case e.why == NotYetValid && now.UnixNano() >= e.until:
			// Its time may have come: check again.
		case e.why == Valid && now.UnixNano() > e.until:
			return nil, Expired
		default:
			return e.claims, e.why
		}
	}
	var who string
	if v.bad != nil && client.IsValid() {
		who = clientKey(client)
		if d, err := v.bad.Peek(context.Background(), who); err == nil && !d.Allowed {
			return nil, Throttled // unchecked, so not cached
		}
	}
	e := v.verify(token, now)
	if e.why == BadSignature && who != "" {
		_, _ = v.bad.Allow(context.Background(), who) // the memory store does not fail
	}
	v.cache.put(sum, e)
	return e.claims, e.why
}

// clientKey is the key of client's bound: its address, or for IPv6 its
// /64, which one client can hold whole.
func clientKey(client netip.Addr) string {
	client = client.Unmap()
	if client.Is6() {
		p, _ := client.Prefix(64)
		client = p.Addr()
	}
	return client.String()
}

// digest returns the SHA-256 of a token, hashing a copy on the stack when
// it is small enough so that a cache hit allocates nothing.
func digest(token string) [sha256.Size]byte {
	var buf [4096]byte
	if len(token) <= len(buf) {
		return sha256.Sum256(append(buf[:0], token...))
	}
	return sha256.Sum256([]byte(token))
}

// entry is what the cache remembers of a token: its claims and the end of
// its validity (Unix ns), or why it failed and, for NotYetValid, when to
// check it again.
type entry struct {
	claims map[string]string
	why    Reason
	until  int64
}

// verify checks a token's signature and claims, as of now.
func (v *Verifier) verify(token string, now time.Time) entry {
	jws, err := jose.ParseSignedCompact(token, v.algs)
	if err != nil {
		if _, ok := errors.AsType[*jose.ErrUnexpectedSignatureAlgorithm](err); ok {
			return entry{why: AlgNotAllowed}
		}
		return entry{why: Malformed}
	}
	if len(jws.Signatures) != 1 {
		return entry{why: Malformed}
	}
	h := jws.Signatures[0].Protected
	cands := v.candidates(h.KeyID)
	if len(cands) == 0 {
		return entry{why: UnknownKey}
	}
	var payload []byte
	tried := false
	for _, i := range cands {
		k := &v.keys[i]
		if !slices.Contains(k.algs, h.Algorithm) {
			continue
		}
		tried = true
		if payload, err = jws.Verify(k.pub); err == nil {
			break
		}
	}
	switch {
	case !tried && h.KeyID != "":
		// The named key exists but may not use this algorithm: the
		// token asks for an algorithm its key is not configured for.
		return entry{why: AlgNotAllowed}
	case !tried:
		return entry{why: UnknownKey}
	case err != nil:
		return entry{why: BadSignature}
	}
	var std jwt.Claims
	if err := json.Unmarshal(payload, &std); err != nil {
		return entry{why: Malformed}
	}
	switch err := std.ValidateWithLeeway(v.expect.WithTime(now), v.opts.Leeway); {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return entry{why: WrongIssuer}
	case errors.Is(err, jwt.ErrInvalidAudience):
		return entry{why: WrongAudience}
	case errors.Is(err, jwt.ErrNotValidYet):
		return entry{why: NotYetValid, until: std.NotBefore.Time().Add(-v.opts.Leeway).UnixNano()}
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return entry{why: NotYetValid, until: std.IssuedAt.Time().Add(-v.opts.Leeway).UnixNano()}
	case errors.Is(err, jwt.ErrExpired):
		return entry{why: Expired}
	case err != nil:
		return entry{why: Malformed}
	}
	if std.Expiry == nil {
		return entry{why: NoExpiry}
	}
	claims, ok := scalarClaims(payload, v.opts.Claims)
	if !ok {
		return entry{why: Malformed}
	}
	return entry{claims: claims, why: Valid, until: std.Expiry.Time().Add(v.opts.Leeway).UnixNano()}
}

// candidates returns the indexes of the keys a token with header kid may
// be checked against: those with that ID, else those with no ID (a PEM
// key, say); every key when the token names none.
func (v *Verifier) candidates(kid string) []int {
	if kid != "" {
		if ks := v.byKID[kid]; len(ks) > 0 {
			return ks
		}
		return v.byKID[""]
	}
	return v.all
}

// scalarClaims decodes a payload's claims, keeping those that are strings,
// numbers (as written) or booleans, and are in keep unless it is empty.
func scalarClaims(payload []byte, keep []string) (map[string]string, bool) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return nil, false
	}
	out := make(map[string]string, min(len(raw), max(len(keep), 1)))
	for name, v := range raw {
		if len(keep) > 0 && !slices.Contains(keep, name) {
			continue
		}
		v = bytes.TrimSpace(v)
		if len(v) == 0 {
			continue
		}
		switch c := v[0]; {
		case c == '"':
			var s string
			if json.Unmarshal(v, &s) == nil {
				out[name] = s
			}
		case c == 't' || c == 'f':
			out[name] = string(v)
		case c == '-' || ('0' <= c && c <= '9'):
			out[name] = string(v)
		}
	}
	return out, true
}

// cache remembers entries by token digest, at most about size of them: two
// generations of maps, the older dropped whole when the newer fills, so
// that tokens in use stay (a hit in the older generation moves the entry
// to the newer) and a flood of new tokens cannot grow it. It is split in
// shards, each with its own lock, so that requests rarely wait for one
// another.
type cache struct {
	shards [16]shard
}

type shard struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]entry
	max       int // entries per generation
}

func (c *cache) init(size int) {
	per := max(size/len(c.shards)/2, 1)
	for i := range c.shards {
		c.shards[i] = shard{cur: map[[sha256.Size]byte]entry{}, max: per}
	}
}

func (c *cache) get(k [sha256.Size]byte) (entry, bool) {
	s := &c.shards[k[0]%uint8(len(c.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.cur[k]; ok {
		return e, true
	}
	e, ok := s.prev[k]
	if ok {
		delete(s.prev, k)
		s.add(k, e)
	}
	return e, ok
}

func (c *cache) put(k [sha256.Size]byte, e entry) {
	s := &c.shards[k[0]%uint8(len(c.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(k, e)
}

func (s *shard) add(k [sha256.Size]byte, e entry) {
	if _, ok := s.cur[k]; !ok && len(s.cur) >= s.max {
		s.prev, s.cur = s.cur, make(map[[sha256.Size]byte]entry, s.max)
	}
	s.cur[k] = e
}
