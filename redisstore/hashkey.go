package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
)

// digestLen is the length of a hashed key in Redis key names: 16 bytes in
// base64url without padding.
const digestLen = 22

// hasher replaces client keys in Redis key names by a fixed-length digest
// (Options.HashKeys): the first 16 bytes of SHA-256 of the key, or of
// HMAC-SHA256 (RFC 2104) keyed by Options.HashSecret if one is set. It
// computes HMAC from its definition over SHA-256 so that a decision
// allocates nothing for keys of up to 192 bytes. It is safe for concurrent
// use.
type hasher struct {
	keyed      bool
	ipad, opad [sha256.BlockSize]byte // the secret, padded and masked
}

func newHasher(secret []byte) *hasher {
	h := &hasher{keyed: len(secret) > 0}
	if len(secret) > sha256.BlockSize {
		sum := sha256.Sum256(secret)
		secret = sum[:]
	}
	copy(h.ipad[:], secret)
	copy(h.opad[:], secret)
	for i := range h.ipad {
		h.ipad[i] ^= 0x36
		h.opad[i] ^= 0x5c
	}
	return h
}

// digest appends the digest of key to dst, digestLen bytes.
func (h *hasher) digest(dst []byte, key string) []byte {
	var buf [sha256.BlockSize + 192]byte
	var sum [sha256.Size]byte
	if !h.keyed {
		sum = sha256.Sum256(append(buf[:0], key...))
	} else {
		sum = sha256.Sum256(append(append(buf[:0], h.ipad[:]...), key...))
		sum = sha256.Sum256(append(append(buf[:0], h.opad[:]...), sum[:]...))
	}
	return base64.RawURLEncoding.AppendEncode(dst, sum[:16])
}

// KeyDigest returns what stands for key in the store's Redis key names
// with Options.HashKeys: its 22-character digest, keyed by
// Options.HashSecret if set; without HashKeys, key itself. It is how
// an operator matches a client to the keys Redis holds, and how Sluice
// shows keys where the store hides them.
func (s *Store) KeyDigest(key string) string {
	if s.hash == nil {
		return key
	}
	return string(s.hash.digest(nil, key))
}
