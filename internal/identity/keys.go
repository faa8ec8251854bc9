package identity

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"

	jose "github.com/go-jose/go-jose/v4"
)

// MaxKeyFileBytes bounds a key file.
const MaxKeyFileBytes = 1 << 20

// ParseKeys reads verification keys from the content of a key file: a
// JWKS ({"keys": [...]}) or a single JWK, or PEM blocks of public keys
// ("PUBLIC KEY", "RSA PUBLIC KEY") or certificates ("CERTIFICATE"). A JWK
// brings its own kid and alg; PEM keys get id (which may be empty). HMAC
// secrets are JWKs of kty "oct". Private keys are refused: the gateway
// needs only public keys, and a file of private keys on it is a leak
// waiting to happen. Errors wrap ErrInvalidKey.
func ParseKeys(data []byte, id string) ([]Key, error) {
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("%w: the file is larger than %d bytes", ErrInvalidKey, MaxKeyFileBytes)
	}
	t := bytes.TrimSpace(data)
	if len(t) > 0 && t[0] == '{' {
		return parseJWKS(t)
	}
	return parsePEM(t, id)
}

func parseJWKS(data []byte) ([]Key, error) {
	var probe struct {
		Keys json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalidKey, err)
	}
	var jwks []json.RawMessage
	if probe.Keys != nil {
		if err := json.Unmarshal(probe.Keys, &jwks); err != nil {
			return nil, fmt.Errorf("%w: keys: want a list of JWKs: %v", ErrInvalidKey, err)
		}
	} else {
		jwks = []json.RawMessage{data}
	}
	if len(jwks) == 0 {
		return nil, fmt.Errorf("%w: the key set holds no keys", ErrInvalidKey)
	}
	var out []Key
	for i, raw := range jwks {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("%w: keys[%d]: %v", ErrInvalidKey, i, err)
		}
		if jwk.Use != "" && jwk.Use != "sig" {
			continue // an encryption key, published beside the signing keys
		}
		switch k := jwk.Key.(type) {
		case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
			return nil, fmt.Errorf("%w: keys[%d] (kid %q) is a private key; give the public key only", ErrInvalidKey, i, jwk.KeyID)
		case []byte:
			k = bytes.Clone(k)
			jwk.Key = k
		}
		if _, err := kindOf(jwk.Key); err != nil {
			return nil, fmt.Errorf("keys[%d] (kid %q): %w", i, jwk.KeyID, err)
		}
		key := Key{ID: jwk.KeyID, Public: jwk.Key}
		if jwk.Algorithm != "" {
			key.Algorithms = []string{jwk.Algorithm}
		}
		out = append(out, key)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the key set holds no signing keys", ErrInvalidKey)
	}
	return out, nil
}

func parsePEM(data []byte, id string) ([]Key, error) {
	var out []Key
	for n := 1; ; n++ {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		var pub any
		var err error
		switch b.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(b.Bytes); err == nil {
				pub = c.PublicKey
			}
		case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("%w: PEM block %d is a private key (%s); give the public key only (openssl pkey -pubout)", ErrInvalidKey, n, b.Type)
		default:
			return nil, fmt.Errorf("%w: PEM block %d is a %q; want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", ErrInvalidKey, n, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: PEM block %d (%s): %v", ErrInvalidKey, n, b.Type, err)
		}
		if _, err := kindOf(pub); err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		out = append(out, Key{ID: id, Public: pub})
	}
	if len(bytes.TrimSpace(data)) > 0 || len(out) == 0 {
		return nil, fmt.Errorf("%w: want a JWKS (JSON) or PEM public keys or certificates", ErrInvalidKey)
	}
	return out, nil
}
