package cli_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

const jwtConfig = `server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}
upstream: builtin:echo
identity:
  jwt:
    keys: [issuer.pem]
    algorithms: [EdDSA]
    issuer: https://auth.example.com/
    audience: api
tiers: {from: jwt:plan}
rules:
  - {name: api, key: [jwt:sub], algorithm: fixed_window, limit: 1, period: 1h, tiers: {premium: {limit: 100}}}
`

// A rotated key file applies without a restart: a token of the new key is
// anonymous (default tier) until the file changes, then premium.
func TestServeReloadsRotatedJWTKeys(t *testing.T) {
	dir := t.TempDir()
	writeKey := func(pub ed25519.PublicKey) {
		t.Helper()
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "issuer.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	oldPub, _, _ := ed25519.GenerateKey(rand.Reader)
	newPub, newKey, _ := ed25519.GenerateKey(rand.Reader)
	writeKey(oldPub)
	if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), []byte(jwtConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: newKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	claims, _ := json.Marshal(map[string]any{"iss": "https://auth.example.com/", "aud": "api", "sub": "alice", "plan": "premium",
		"exp": time.Now().Add(time.Hour).Unix()})
	jws, err := signer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := jws.CompactSerialize()

	poll := cli.PollByHand(t)
	base, _, stderr := clitest.Serve(t, filepath.Join(dir, "sluice.yaml"))
	policy := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Policy")
	}
	if p := policy(); p != `"api";q=1;w=3600` {
		t.Fatalf("a token of a key not yet trusted: policy %q, want the default tier's", p)
	}
	writeKey(newPub)
	poll()
	if p := policy(); p != `"api";q=100;w=3600` {
		t.Fatalf("after a check for changes, a token of the rotated key: policy %q, want the pro tier's: %s", p, stderr.String())
	}
}

// check-config warns when tokens are accepted from any issuer or for any
// audience, and not about tiers taken from a verified claim.
func TestCheckConfigWarnsWithoutIssuerOrAudience(t *testing.T) {
	dir := t.TempDir()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	if err := os.WriteFile(filepath.Join(dir, "issuer.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		drop, want string
	}{
		{"", ""},
		{"    audience: api\n", "warning: identity.jwt has no audience: any token the keys signed is accepted"},
		{"    issuer: https://auth.example.com/\n    audience: api\n", "warning: identity.jwt has no issuer and audience"},
	} {
		cfg := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(cfg, []byte(strings.Replace(jwtConfig, tc.drop, "", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if c := cli.Run(context.Background(), []string{"check-config", cfg}, &out, &errb); c != 0 {
			t.Fatalf("check-config: exit %d: %s", c, errb.String())
		}
		got := strings.TrimSpace(errb.String())
		if (tc.want == "" && got != "") || !strings.Contains(got, tc.want) {
			t.Errorf("without %q: stderr %q, want %q", tc.drop, got, tc.want)
		}
	}
}
