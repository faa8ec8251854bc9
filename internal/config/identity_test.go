package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/identity"
)

func TestIdentityProblems(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       []string // each a substring of one problem, in order
	}{
		{"jwt key part without identity", `tiers: { from: jwt:plan }
rules:
  - { name: a, algorithm: gcra, limit: 1, period: 1s }
  - { name: b, key: [ip, jwt:sub], algorithm: gcra, limit: 1, period: 1s }`,
			[]string{`:2:16: tiers.from: jwt:plan needs identity.jwt`, `:5:21: rules[1].key: jwt:sub needs identity.jwt`}},
		{"missing fields", "identity: { jwt: { leeway: 1s } }\nrules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]",
			[]string{"identity.jwt.keys: missing", "identity.jwt.algorithms: missing"}},
		{"bad fields", `identity:
  jwt:
    keys: [{ kid: x }]
    algorithms: [RS256, none, HS1, RS256]
    leeway: 10m
    issuer: [a]
    max_bad_signatures: -1
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`,
			[]string{`:4:12: identity.jwt.keys[0].file: missing`, `:5:25: identity.jwt.algorithms[1]: none accepts unsigned tokens`, `identity.jwt.algorithms[2]: unknown algorithm "HS1"`,
				`identity.jwt.algorithms[3]: RS256 appears twice`, `identity.jwt.leeway: want a duration from 0s to 5m0s`, `identity.jwt.issuer: want a string`,
				`identity.jwt.max_bad_signatures: want a whole number from 0 to 1000000, got -1`}},
		{"unknown field", "identity: { jwt: { keys: [k.pem], algorithms: [RS256], audiences: x } }\nrules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]",
			[]string{`identity.jwt.audiences: unknown field (did you mean "audience"?)`}},
		{"lists by claim", `identity: { jwt: { keys: [k.pem], algorithms: [RS256] } }
lists: { a: { keys: [k], key: jwt:sub } }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{"lists.a.key: lists cannot be looked up by a token's claim yet"}},
		{"client without from", `tiers: { client: header:X-User }
rules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]`, []string{"tiers.client: needs tiers.from"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantProblems(t, listsBase+tt.file, tt.want)
		})
	}
}

func ecPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestIdentityKeyFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ec.pem"), ecPEM(t))
	writeFile(t, filepath.Join(dir, "hs.jwks"), `{"keys": [{"kty": "oct", "kid": "hs-1", "alg": "HS256", "k": "c2x1aWNlLXRlc3Qtc2VjcmV0LW9mLTMyLWJ5dGVzLW9rIQ"}]}`)
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, listsBase+`identity:
  jwt:
    keys:
      - hs.jwks
      - { file: ec.pem, kid: ec-1 }
    algorithms: [ES256, HS256]
    issuer: https://auth.example.com/
    audience: api
tiers: { from: jwt:plan }
rules: [{ name: r, key: [jwt:sub], algorithm: gcra, limit: 1, period: 1s, tiers: { premium: { limit: 5 } } }]
`)
	c, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	j := c.JWT
	if j == nil || len(j.Keys) != 2 || j.Keys[0].ID != "hs-1" || j.Keys[1].ID != "ec-1" || j.Leeway != 30*time.Second || j.Audience != "api" {
		t.Fatalf("identity.jwt: got %+v", j)
	}
	if got := j.Options().MaxBadSignatures; got != 10 {
		t.Errorf("max_bad_signatures defaults to %d, want 10", got)
	}
	j.MaxBadSignatures = 0 // as max_bad_signatures: 0 sets it
	if got := j.Options().MaxBadSignatures; got >= 0 {
		t.Errorf("max_bad_signatures 0: the verifier's bound is %d, want it off (negative)", got)
	}
	if got := c.Limiter.Tiers.Client; got != httplimit.JWT("sub") {
		t.Errorf("tiers.client defaults to %v, want jwt:sub", got)
	}
	if got := c.JWTKeyFiles(cfgPath); len(got) != 2 || got[0] != filepath.Join(dir, "hs.jwks") || got[1] != filepath.Join(dir, "ec.pem") {
		t.Errorf("JWTKeyFiles = %q", got)
	}

	// Problems with the key files are reported at the lines naming them.
	for _, tt := range []struct {
		ec, hs, want string
	}{
		{"nope", "", ":6:9: identity.jwt.keys[1]: ec.pem: invalid key: want a JWKS (JSON) or PEM"},
		{"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "", "ec.pem: invalid key: PEM block 1 is a private key"},
		{"", `{"keys": [{"kty": "oct", "k": "c2hvcnQ"}]}`, ":4:5: identity.jwt: key #1: invalid key: an HMAC secret of 5 bytes is too short for HS256"},
	} {
		if tt.ec != "" {
			writeFile(t, filepath.Join(dir, "ec.pem"), tt.ec)
		}
		if tt.hs != "" {
			writeFile(t, filepath.Join(dir, "hs.jwks"), tt.hs)
		}
		_, err := config.Load(cfgPath)
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want ErrInvalid containing %q", err, tt.want)
		}
		writeFile(t, filepath.Join(dir, "ec.pem"), ecPEM(t))
	}
	os.Remove(filepath.Join(dir, "hs.jwks"))
	if _, err := config.Load(cfgPath); err == nil || !strings.Contains(err.Error(), "identity.jwt.keys[0]: hs.jwks: open") {
		t.Errorf("missing file: got %v", err)
	}
}

// The example's demo key pair works: a token signed with the private half,
// as examples/jwt/mint-token.sh signs it, verifies under the example's
// identity.jwt.
func TestPlansJWTExampleDemoKey(t *testing.T) {
	c, err := config.Load("../../examples/plans-jwt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../examples/jwt/DEMO-issuer.key")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("DEMO-issuer.key holds no PEM block")
	}
	priv, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "demo-2026")
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	payload := fmt.Sprintf(`{"iss":"https://auth.example.com/","aud":"api.example.com","sub":"alice","plan":"premium","iat":%d,"exp":%d}`, now.Unix(), now.Add(time.Hour).Unix())
	jws, err := s.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := jws.CompactSerialize()
	v, err := identity.New(c.JWT.Options())
	if err != nil {
		t.Fatal(err)
	}
	claims, why := v.Verify(tok)
	if why != identity.Valid || claims["plan"] != "premium" || claims["sub"] != "alice" {
		t.Fatalf("got %v %v, want a valid premium token", claims, why)
	}
	// The script the example's comments give mints tokens that verify.
	if _, err := exec.LookPath("openssl"); err == nil {
		cmd := exec.Command("../../examples/jwt/mint-token.sh", "bob", "enterprise", "60")
		cmd.Env = append(os.Environ(), "ANCHOR=15T09:00")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mint-token.sh: %v", err)
		}
		claims, why := v.Verify(strings.TrimSpace(string(out)))
		if why != identity.Valid || claims["plan"] != "enterprise" || claims["sub"] != "bob" || claims["billing_anchor"] != "15T09:00" {
			t.Errorf("mint-token.sh's token: got %v %v, want a valid enterprise token anchored on 15T09:00", claims, why)
		}
	}
	if c.Limiter.Tiers.From != httplimit.JWT("plan") || c.Limiter.Tiers.Anchor != httplimit.JWT("billing_anchor") || len(c.Limiter.Rules) == 0 || c.Limiter.Rules[0].Key[0] != httplimit.JWT("sub") {
		t.Errorf("the example's tiers and rules: %+v %+v", c.Limiter.Tiers, c.Limiter.Rules)
	}
}
