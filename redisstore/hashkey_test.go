package redisstore_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// With HashKeys, Redis holds no raw client key: the key part of every key
// name is base64url of the first 16 bytes of SHA-256 of the client key
// (HMAC-SHA256 keyed by HashSecret when set), every key of one entity keeps
// one hash tag, two stores with the same setting and secret share the
// limit, a store with another secret counts apart (the documented
// trade-off), and Reset removes the hashed keys.
func TestHashKeys(t *testing.T) {
	srv := redistest.Start(t)
	secret := []byte("gateway secret")
	base := redisstore.Options{URL: srv.URL(), Timeout: slow, HashKeys: true, HashSecret: secret, DenyCache: -1}
	a, b := open(t, base), open(t, base)
	other := base
	other.HashSecret = []byte("another secret")
	c := open(t, other)
	plain := base
	plain.HashSecret = nil
	d := open(t, plain)

	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Count: 5, Period: time.Hour},
		{Algorithm: sluice.SlidingLog, Count: 10, Period: time.Hour},
	}
	clients := []string{"203.0.113.7", "sk_live_0123456789abcdef", "{tag}:with:colons", ""}
	for _, key := range clients {
		admitted := 0
		for i := range 8 {
			s := a
			if i%2 == 1 {
				s = b
			}
			if allow(t, limiter(t, s, "hashed", limits...), key).Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Errorf("key %q: two stores with one secret admitted %d of 8, want 5 (one shared limit)", key, admitted)
		}
		if !allow(t, limiter(t, c, "hashed", limits...), key).Allowed {
			t.Errorf("key %q: a store with another secret was denied, want its own count", key)
		}
		allow(t, limiter(t, d, "hashed", limits...), key)
	}

	keys := srv.DoList(t, "KEYS", "*")
	for _, k := range keys {
		for _, key := range clients[:3] {
			if strings.Contains(k, key) {
				t.Errorf("Redis key %q holds the client key %q", k, key)
			}
		}
	}
	mac := func(secret []byte, key string) string {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(key))
		return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
	}
	sha := func(key string) string {
		sum := sha256.Sum256([]byte(key))
		return base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	for _, key := range clients {
		// KeyDigest names the digest that stands for the key.
		if got, want := a.KeyDigest(key), mac(secret, key); got != want {
			t.Errorf("KeyDigest(%q) = %q, want %q", key, got, want)
		}
		if got, want := d.KeyDigest(key), sha(key); got != want {
			t.Errorf("KeyDigest(%q) without a secret = %q, want %q", key, got, want)
		}
	}
	for _, key := range clients {
		for _, digest := range []string{mac(secret, key), mac(other.HashSecret, key), sha(key)} {
			tag := fmt.Sprintf("sluice:{6:hashed:%s}:", digest)
			var mine []string
			for _, k := range keys {
				if strings.HasPrefix(k, tag) {
					mine = append(mine, k)
				}
			}
			// The GCRA state, the log and the log's auxiliary key.
			if len(mine) != 3 {
				t.Errorf("key %q: keys with the hash tag %q: %q, want 3", key, tag, mine)
			}
		}
	}
	if got, want := len(keys), 3*3*len(clients); got != want {
		t.Errorf("Redis holds %d keys, want %d: %q", got, want, keys)
	}

	key := clients[0]
	if err := limiter(t, a, "hashed", limits...).Reset(context.Background(), key); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	tag := fmt.Sprintf("sluice:{6:hashed:%s}:", mac(secret, key))
	if left := slices.DeleteFunc(srv.DoList(t, "KEYS", "*"), func(k string) bool { return !strings.HasPrefix(k, tag) }); len(left) != 0 {
		t.Errorf("after Reset: keys %q remain", left)
	}
	if !allow(t, limiter(t, b, "hashed", limits...), key).Allowed {
		t.Errorf("after Reset through one store: the other store was denied, want a fresh key")
	}
}
