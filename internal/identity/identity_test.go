package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluicehq/sluice/clock"
)

// t0 is the tests' time: tokens are issued relative to it, and the
// Verifier's clock starts at it.
var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// keys of each algorithm, generated once.
var testKeys = sync.OnceValue(func() map[string]any {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, dk, _ := ed25519.GenerateKey(rand.Reader)
	hk := make([]byte, 32)
	rand.Read(hk)
	return map[string]any{"RS256": rk, "ES256": ek, "EdDSA": dk, "HS256": hk}
})

func public(priv any) any {
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		return &k.PublicKey
	case *ecdsa.PrivateKey:
		return &k.PublicKey
	case ed25519.PrivateKey:
		return k.Public()
	}
	return priv
}

// sign returns a compact JWS of claims signed with priv by alg, with kid
// in its header if not empty.
func sign(t testing.TB, alg string, priv any, kid string, claims map[string]any) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	opts.WithType("JWT")
	if kid != "" {
		opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(alg), Key: priv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// claims are valid ones for the verifier newVerifier builds.
func claims(extra map[string]any) map[string]any {
	c := map[string]any{"sub": "user-1", "plan": "premium", "iss": "https://auth.example.com", "aud": "api",
		"exp": t0.Add(time.Hour).Unix(), "nbf": t0.Add(-time.Minute).Unix(), "iat": t0.Add(-time.Minute).Unix(), "org_id": 42, "admin": true}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// newVerifier returns a Verifier of every test key (kid = its algorithm)
// accepting algs, on a fake clock at t0.
func newVerifier(t testing.TB, algs ...string) (*Verifier, *clock.Fake, map[Reason]int) {
	t.Helper()
	var keys []Key
	for alg, k := range testKeys() {
		keys = append(keys, Key{ID: alg, Public: public(k)})
	}
	if len(algs) == 0 {
		algs = []string{"RS256", "ES256", "EdDSA", "HS256"}
	}
	fc := clock.NewFake(t0)
	var mu sync.Mutex
	seen := map[Reason]int{}
	v, err := New(Options{Keys: keys, Algorithms: algs, Issuer: "https://auth.example.com", Audience: "api",
		Leeway: 30 * time.Second, Clock: fc, Observe: func(r Reason) { mu.Lock(); seen[r]++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	return v, fc, seen
}

func TestVerifyEachAlgorithm(t *testing.T) {
	v, _, _ := newVerifier(t)
	for alg, priv := range testKeys() {
		for _, kid := range []string{alg, ""} {
			tok := sign(t, alg, priv, kid, claims(nil))
			c, why := v.Verify(tok)
			if why != Valid {
				t.Fatalf("%s (kid %q): got %v, want valid", alg, kid, why)
			}
			if c["sub"] != "user-1" || c["plan"] != "premium" || c["org_id"] != "42" || c["admin"] != "true" {
				t.Errorf("%s: claims %v", alg, c)
			}
			if _, ok := c["aud"]; ok && false {
				t.Error("unreachable")
			}
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	keys := testKeys()
	rsaKey := keys["RS256"].(*rsa.PrivateKey)
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	good := sign(t, "RS256", rsaKey, "RS256", claims(nil))
	parts := strings.Split(good, ".")

	// alg none: a header naming none and an empty signature.
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	// Algorithm confusion: HS256 with the RSA public key's PEM (and DER)
	// as the HMAC secret, naming the RSA key's kid.
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	confusedPEM := sign(t, "HS256", pemKey, "RS256", claims(nil))
	confusedDER := sign(t, "HS256", der, "", claims(nil))
	// A payload swapped under a valid signature.
	forgedPayload := parts[0] + "." + base64.RawURLEncoding.EncodeToString(mustJSON(claims(map[string]any{"plan": "enterprise"}))) + "." + parts[2]

	tests := []struct {
		name  string
		token string
		want  Reason
	}{
		{"empty", "", Missing},
		{"garbage", "not-a-token", Malformed},
		{"two parts", parts[0] + "." + parts[1], Malformed},
		{"oversized", strings.Repeat("a", 9000), Malformed},
		{"alg none", none, AlgNotAllowed},
		{"alg none signed", none + "AAAA", AlgNotAllowed},
		{"forged signature: another key", sign(t, "RS256", otherRSA, "RS256", claims(nil)), BadSignature},
		{"forged signature: another key, no kid", sign(t, "RS256", otherRSA, "", claims(nil)), BadSignature},
		{"forged payload", forgedPayload, BadSignature},
		{"RSA public key PEM as HMAC secret", confusedPEM, AlgNotAllowed},
		{"RSA public key DER as HMAC secret", confusedDER, BadSignature},
		{"expired", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"exp": t0.Add(-31 * time.Second).Unix()})), Expired},
		{"not yet valid", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"nbf": t0.Add(31 * time.Second).Unix()})), NotYetValid},
		{"issued in the future", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"iat": t0.Add(time.Hour).Unix(), "nbf": nil})), NotYetValid},
		{"wrong issuer", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"iss": "https://evil.example.com"})), WrongIssuer},
		{"no issuer", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"iss": nil})), WrongIssuer},
		{"wrong audience", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"aud": []string{"other", "more"}})), WrongAudience},
		{"no expiry", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"exp": nil})), NoExpiry},
		{"exp not a number", sign(t, "RS256", rsaKey, "RS256", claims(map[string]any{"exp": "tomorrow"})), Malformed},
		{"kid not found, no key without kid", sign(t, "RS256", otherRSA, "nope", claims(nil)), UnknownKey},
		{"not configured algorithm", sign(t, "RS384", rsaKey, "RS256", claims(nil)), AlgNotAllowed},
		{"key used for another algorithm", sign(t, "ES256", keys["ES256"], "RS256", claims(nil)), AlgNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, _, _ := newVerifier(t)
			c, why := v.Verify(tt.token)
			if why != tt.want || c != nil {
				t.Fatalf("got %v %v, want %v and no claims", why, c, tt.want)
			}
			// Asked again, the cache answers the same.
			if c, why := v.Verify(tt.token); why != tt.want || c != nil {
				t.Fatalf("again: got %v %v, want %v", why, c, tt.want)
			}
		})
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestOnlyConfiguredAlgorithms: a key verifies only the algorithms both
// configured and suited to it.
func TestOnlyConfiguredAlgorithms(t *testing.T) {
	keys := testKeys()
	v, _, _ := newVerifier(t, "ES256") // the RSA, Ed25519 and HMAC keys are then unusable
	if _, why := v.Verify(sign(t, "ES256", keys["ES256"], "ES256", claims(nil))); why != Valid {
		t.Fatalf("ES256: got %v", why)
	}
	for _, alg := range []string{"RS256", "EdDSA", "HS256"} {
		if _, why := v.Verify(sign(t, alg, keys[alg], alg, claims(nil))); why != AlgNotAllowed {
			t.Errorf("%s with only ES256 configured: got %v, want alg_not_allowed", alg, why)
		}
	}
}

func TestNewRejectsKeysThatCannotWork(t *testing.T) {
	keys := testKeys()
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	tests := []struct {
		name string
		opts Options
		want error
	}{
		{"no algorithms", Options{Keys: []Key{{Public: public(keys["RS256"])}}}, ErrInvalidOptions},
		{"none", Options{Keys: []Key{{Public: public(keys["RS256"])}}, Algorithms: []string{"none"}}, ErrInvalidOptions},
		{"no keys", Options{Algorithms: []string{"RS256"}}, ErrInvalidOptions},
		{"key of no configured algorithm", Options{Keys: []Key{{Public: public(keys["ES256"])}}, Algorithms: []string{"RS256"}}, ErrInvalidKey},
		{"short secret", Options{Keys: []Key{{Public: []byte("short")}}, Algorithms: []string{"HS256"}}, ErrInvalidKey},
		{"small RSA key", Options{Keys: []Key{{Public: &small.PublicKey}}, Algorithms: []string{"RS256"}}, ErrInvalidKey},
		{"JWK alg unsuited to the key", Options{Keys: []Key{{Public: public(keys["RS256"]), Algorithms: []string{"HS256"}}}, Algorithms: []string{"RS256", "HS256"}}, ErrInvalidKey},
		{"empty RSA key", Options{Keys: []Key{{Public: &rsa.PublicKey{}}}, Algorithms: []string{"RS256"}}, ErrInvalidKey},
		{"nil EC key", Options{Keys: []Key{{Public: (*ecdsa.PublicKey)(nil)}}, Algorithms: []string{"ES256"}}, ErrInvalidKey},
		{"private key", Options{Keys: []Key{{Public: keys["RS256"]}}, Algorithms: []string{"RS256"}}, ErrInvalidKey},
		{"leeway", Options{Keys: []Key{{Public: public(keys["RS256"])}}, Algorithms: []string{"RS256"}, Leeway: time.Hour}, ErrInvalidOptions},
	}
	for _, tt := range tests {
		if _, err := New(tt.opts); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestExpiryAndLeeway follows one token through time on the fake clock:
// valid (and cached) until exp plus the leeway, expired after, though the
// cache still holds it; a token not yet valid becomes valid at nbf less
// the leeway.
func TestExpiryAndLeeway(t *testing.T) {
	v, fc, _ := newVerifier(t)
	k := testKeys()["EdDSA"]
	tok := sign(t, "EdDSA", k, "EdDSA", claims(map[string]any{"exp": t0.Add(10 * time.Second).Unix()}))
	if _, why := v.Verify(tok); why != Valid {
		t.Fatalf("got %v", why)
	}
	fc.Set(t0.Add(40 * time.Second)) // exp + leeway
	if _, why := v.Verify(tok); why != Valid {
		t.Fatalf("at exp+leeway: got %v, want valid", why)
	}
	fc.Set(t0.Add(41 * time.Second))
	if _, why := v.Verify(tok); why != Expired {
		t.Fatalf("after exp+leeway: got %v, want expired", why)
	}

	fc.Set(t0)
	later := sign(t, "EdDSA", k, "EdDSA", claims(map[string]any{"nbf": t0.Add(time.Minute).Unix()}))
	if _, why := v.Verify(later); why != NotYetValid {
		t.Fatalf("before nbf: got %v", why)
	}
	fc.Set(t0.Add(29 * time.Second))
	if _, why := v.Verify(later); why != NotYetValid {
		t.Fatalf("before nbf-leeway: got %v", why)
	}
	fc.Set(t0.Add(30 * time.Second))
	if _, why := v.Verify(later); why != Valid {
		t.Fatalf("at nbf-leeway: got %v, want valid", why)
	}
}

func TestOnlyTheClaimsAskedForAreKept(t *testing.T) {
	k := testKeys()["HS256"]
	v, err := New(Options{Keys: []Key{{Public: k}}, Algorithms: []string{"HS256"}, Claims: []string{"sub", "org_id", "absent"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	c, why := v.Verify(sign(t, "HS256", k, "", claims(nil)))
	if why != Valid || len(c) != 2 || c["sub"] != "user-1" || c["org_id"] != "42" {
		t.Fatalf("got %v %v, want only sub and org_id", c, why)
	}
}

func TestClaimsFromRequest(t *testing.T) {
	v, _, seen := newVerifier(t)
	tok := sign(t, "ES256", testKeys()["ES256"], "ES256", claims(nil))
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, "BEARER  " + tok + " "} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", h)
		if c := v.Claims(r, netip.Addr{}); c["sub"] != "user-1" {
			t.Errorf("%q: got %v", h, c)
		}
	}
	for _, h := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", tok} {
		r, _ := http.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if c := v.Claims(r, netip.Addr{}); c != nil {
			t.Errorf("%q: got %v, want none", h, c)
		}
	}
	if seen[Valid] != 3 || seen[Missing] != 4 {
		t.Errorf("observed %v, want 3 valid and 4 missing", seen)
	}
}

// TestBadSignaturesBounded: a client whose new tokens keep failing their
// signature check gets its further new tokens Throttled, unchecked, until
// it is back within MaxBadSignatures a second (burst ten seconds' worth);
// other clients, tokens already in the cache and callers that name no
// client are not affected.
func TestBadSignaturesBounded(t *testing.T) {
	var keys []Key
	for alg, k := range testKeys() {
		keys = append(keys, Key{ID: alg, Public: public(k)})
	}
	fc := clock.NewFake(t0)
	v, err := New(Options{Keys: keys, Algorithms: []string{"ES256"}, Clock: fc, MaxBadSignatures: 2})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	forged := func() string {
		n++
		return sign(t, "ES256", other, "ES256", claims(map[string]any{"jti": strconv.Itoa(n)}))
	}
	valid := func() string {
		n++
		return sign(t, "ES256", testKeys()["ES256"], "ES256", claims(map[string]any{"jti": strconv.Itoa(n)}))
	}
	attacker, neighbour := netip.MustParseAddr("2001:db8:1:2::7"), netip.MustParseAddr("2001:db8:1:2::8")
	bystander := netip.MustParseAddr("192.0.2.9")

	seenBefore := valid()
	if _, why := v.VerifyFrom(seenBefore, attacker); why != Valid {
		t.Fatalf("a valid token: %v", why)
	}
	for i := range 20 { // the burst: 10 s at 2 a second
		if _, why := v.VerifyFrom(forged(), attacker); why != BadSignature {
			t.Fatalf("forged token %d within the bound: %v, want bad_signature", i, why)
		}
	}
	if _, why := v.VerifyFrom(forged(), attacker); why != Throttled {
		t.Fatalf("a forged token past the bound: %v, want throttled", why)
	}
	if _, why := v.VerifyFrom(valid(), neighbour); why != Throttled {
		t.Errorf("a new valid token from the same /64: %v, want throttled", why)
	}
	if _, why := v.VerifyFrom(seenBefore, attacker); why != Valid {
		t.Errorf("a token in the cache: %v, want valid", why)
	}
	if _, why := v.VerifyFrom(valid(), bystander); why != Valid {
		t.Errorf("another client's new token: %v, want valid", why)
	}
	if _, why := v.Verify(forged()); why != BadSignature {
		t.Errorf("no client named: %v, want bad_signature", why)
	}
	fc.Advance(time.Second) // room for two more checks
	for i := range 2 {
		if _, why := v.VerifyFrom(forged(), attacker); why != BadSignature {
			t.Fatalf("forged token %d a second later: %v, want bad_signature", i, why)
		}
	}
	tok := forged()
	if _, why := v.VerifyFrom(tok, attacker); why != Throttled {
		t.Fatalf("the third a second later: %v, want throttled", why)
	}
	fc.Advance(time.Second)
	if _, why := v.VerifyFrom(tok, attacker); why != BadSignature {
		t.Errorf("a throttled token, sent again with room: %v, want bad_signature (throttling is not cached)", why)
	}

	off, err := New(Options{Keys: keys, Algorithms: []string{"ES256"}, Clock: fc, MaxBadSignatures: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, why := off.VerifyFrom(forged(), attacker); why != BadSignature {
			t.Fatalf("bound off, forged token %d: %v, want bad_signature", i, why)
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	var c cache
	c.init(64)
	var k [32]byte
	for i := range 10_000 {
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		c.put(k, entry{why: Malformed})
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].cur) + len(c.shards[i].prev)
	}
	if n > 64 {
		t.Fatalf("the cache holds %d entries, want at most 64", n)
	}
	// The most recent entry is still there.
	if _, ok := c.get(k); !ok {
		t.Fatal("the last entry put is gone")
	}
}

func TestParseKeys(t *testing.T) {
	keys := testKeys()
	var jwks jose.JSONWebKeySet
	for alg, k := range keys {
		jwks.Keys = append(jwks.Keys, jose.JSONWebKey{Key: public(k), KeyID: alg, Algorithm: alg, Use: "sig"})
	}
	jwks.Keys = append(jwks.Keys, jose.JSONWebKey{Key: public(keys["RS256"]), KeyID: "enc", Use: "enc"})
	data, err := json.Marshal(jwks)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseKeys(data, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("got %d keys, want 4 (the encryption key skipped)", len(got))
	}
	v, err := New(Options{Keys: got, Algorithms: []string{"RS256", "ES256", "EdDSA", "HS256"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for alg, k := range keys {
		if _, why := v.Verify(sign(t, alg, k, alg, claims(nil))); why != Valid {
			t.Errorf("%s from the JWKS: got %v", alg, why)
		}
	}

	var pems []byte
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		der, _ := x509.MarshalPKIXPublicKey(public(keys[alg]))
		pems = append(pems, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	got, err = ParseKeys(pems, "pem-1")
	if err != nil || len(got) != 3 || got[0].ID != "pem-1" {
		t.Fatalf("PEM: got %v, %v", got, err)
	}
	v, err = New(Options{Keys: got, Algorithms: []string{"RS256", "ES256", "EdDSA"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		if _, why := v.Verify(sign(t, alg, keys[alg], "pem-1", claims(nil))); why != Valid {
			t.Errorf("%s from PEM: got %v", alg, why)
		}
		if _, why := v.Verify(sign(t, alg, keys[alg], "other", claims(nil))); why != UnknownKey {
			t.Errorf("%s from PEM, another kid: got %v, want unknown_key", alg, why)
		}
	}
	// Keys without an ID are tried for a kid no key has.
	got, _ = ParseKeys(pems, "")
	v, _ = New(Options{Keys: got, Algorithms: []string{"RS256", "ES256", "EdDSA"}, Clock: clock.NewFake(t0)})
	if _, why := v.Verify(sign(t, "ES256", keys["ES256"], "rotated-2026", claims(nil))); why != Valid {
		t.Errorf("a PEM key without ID, a token with a kid: got %v, want valid", why)
	}

	privDER, _ := x509.MarshalPKCS8PrivateKey(keys["RS256"])
	privJWK, _ := json.Marshal(jose.JSONWebKey{Key: keys["ES256"], KeyID: "p"})
	for name, bad := range map[string][]byte{
		"empty":           nil,
		"not PEM":         []byte("hello"),
		"private PEM":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}),
		"private JWK":     privJWK,
		"empty key set":   []byte(`{"keys": []}`),
		"bad JSON":        []byte(`{"keys": [`),
		"unknown kty":     []byte(`{"kty": "XYZ"}`),
		"trailing junk":   append(pems, "junk"...),
		"bad PEM content": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("nope")}),
	} {
		if _, err := ParseKeys(bad, ""); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: got %v, want ErrInvalidKey", name, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	v, _, _ := newVerifier(f)
	keys := testKeys()
	f.Add(sign(f, "RS256", keys["RS256"], "RS256", claims(nil)))
	f.Add(sign(f, "HS256", keys["HS256"], "", claims(map[string]any{"exp": nil})))
	f.Add(sign(f, "EdDSA", keys["EdDSA"], "EdDSA", claims(map[string]any{"sub": map[string]any{"x": 1}})))
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		c, why := v.Verify(token)
		if (why == Valid) != (c != nil) {
			t.Fatalf("reason %v with claims %v", why, c)
		}
		if why == Valid {
			// Only tokens signed by a test key verify: the fuzzer cannot
			// forge one, so a valid result must be a seed's.
			if _, ok := c["sub"]; !ok {
				t.Fatalf("a valid token without sub: %v", c)
			}
		}
		if c2, why2 := v.Verify(token); why2 != why || (c2 == nil) != (c == nil) {
			t.Fatalf("cached: got %v, first %v", why2, why)
		}
	})
}

func BenchmarkClaims(b *testing.B) {
	v, _, _ := newVerifier(b)
	for _, alg := range []string{"RS256", "ES256", "EdDSA", "HS256"} {
		tok := sign(b, alg, testKeys()[alg], alg, claims(nil))
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		b.Run(alg+"/cached", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if v.Claims(r, netip.MustParseAddr("192.0.2.1")) == nil {
						b.Fatal("no claims")
					}
				}
			})
		})
		b.Run(alg+"/uncached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if e := v.verify(tok, t0); e.why != Valid {
					b.Fatal(e.why)
				}
			}
		})
	}
}

func FuzzParseKeys(f *testing.F) {
	keys := testKeys()
	der, _ := x509.MarshalPKIXPublicKey(public(keys["ES256"]))
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: public(keys["EdDSA"]), KeyID: "a", Algorithm: "EdDSA"}, {Key: keys["HS256"], KeyID: "h"}}})
	f.Add(jwks)
	f.Add([]byte(`{"kty":"RSA","n":"AQAB","e":"AQAB"}`))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := ParseKeys(data, "k")
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if len(ks) == 0 {
			t.Fatal("no keys and no error")
		}
		for _, k := range ks {
			if _, err := kindOf(k.Public); err != nil {
				t.Fatalf("a key of unusable type: %v", err)
			}
		}
	})
}
