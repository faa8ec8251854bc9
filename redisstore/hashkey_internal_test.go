package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

// The digest is HMAC-SHA256 (or SHA-256 without a secret), truncated to 16
// bytes, as crypto/hmac computes it, for secrets and keys of every length
// around the block size and the stack buffer, and allocates nothing for
// keys that fit.
func TestDigest(t *testing.T) {
	for _, sl := range []int{0, 1, 32, 63, 64, 65, 200} {
		secret := []byte(strings.Repeat("s", sl))
		h := newHasher(secret)
		for _, kl := range []int{0, 1, 15, 64, 191, 192, 193, 1000} {
			key := strings.Repeat("k", kl)
			var sum []byte
			if sl == 0 {
				s := sha256.Sum256([]byte(key))
				sum = s[:]
			} else {
				m := hmac.New(sha256.New, secret)
				m.Write([]byte(key))
				sum = m.Sum(nil)
			}
			want := base64.RawURLEncoding.EncodeToString(sum[:16])
			if got := string(h.digest(nil, key)); got != want || len(got) != digestLen {
				t.Errorf("secret of %d bytes, key of %d: got %q, want %q (%d bytes)", sl, kl, got, want, digestLen)
			}
		}
	}
	h := newHasher([]byte("secret"))
	var buf [digestLen]byte
	if n := testing.AllocsPerRun(100, func() { h.digest(buf[:0], "203.0.113.7") }); n != 0 {
		t.Errorf("digest of a short key: %v allocations, want 0", n)
	}
}

func BenchmarkDigest(b *testing.B) {
	for _, secret := range []string{"", "secret"} {
		h := newHasher([]byte(secret))
		b.Run("secret="+secret, func(b *testing.B) {
			b.ReportAllocs()
			var buf [digestLen]byte
			for b.Loop() {
				h.digest(buf[:0], "203.0.113.7")
			}
		})
	}
}
