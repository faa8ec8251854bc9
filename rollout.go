package sluice

import "fmt"

// Rollout enforces a limit on a share of its keys while the others run in
// shadow mode (counted and reported, never denied), for rolling a new
// limit out gradually: 5% of the clients, then 50%, then all of them,
// watching what the limit would have rejected on the way.
//
// Which keys are enforced is decided by the key alone, so one client is
// either enforced or not on every request, in every process and every
// version, and never flaps; raising Percent only adds keys (a key enforced
// at 10% is enforced at 20%), and lowering it only removes them. The
// choice is salted with the limit's name, so that two limits at 10%
// enforce on different clients rather than the same unlucky tenth.
//
// The choice: h is the 64-bit FNV-1a hash of the name, one zero byte and
// the key, then mixed by MurmurHash3's 64-bit finalizer (fmix64); the key
// is enforced when the top 53 bits of h, as a number below 2^53, are below
// Percent/100 × 2^53. Over many keys the enforced share is Percent, within
// the binomial spread (for n keys, a standard deviation of
// sqrt(n·p·(1−p)) keys).
//
// A nil *Rollout enforces every key. A Rollout is a value and safe for
// concurrent use.
type Rollout struct {
	// Percent is the share of keys enforced, in percent: 0 (none: the
	// limit runs wholly in shadow mode) to 100 (all), fractions allowed
	// (0.5 is one key in two hundred).
	Percent float64
}

// Validate reports whether Percent is between 0 and 100, with an error
// wrapping ErrInvalidLimit.
func (r *Rollout) Validate() error {
	if r == nil {
		return nil
	}
	if !(r.Percent >= 0 && r.Percent <= 100) { // NaN fails both
		return fmt.Errorf("%w: enforce on %v%% of keys, want 0 to 100", ErrInvalidLimit, r.Percent)
	}
	return nil
}

// Enforces reports whether the limit called name is enforced on key (see
// Rollout): always for a nil *Rollout. It does not allocate.
func (r *Rollout) Enforces(name, key string) bool {
	if r == nil {
		return true
	}
	return enforces(r.Percent, rolloutHash(name, key))
}

func enforces(percent float64, h uint64) bool {
	switch {
	case percent >= 100:
		return true
	case !(percent > 0): // 0, negative or NaN
		return false
	}
	return float64(h>>11) < percent/100*(1<<53)
}

// rolloutHash is FNV-1a (64-bit) of name, a zero byte and key, finished
// with fmix64 so that every bit of the input moves the top bits.
func rolloutHash(name, key string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h *= prime // the zero byte: h ^ 0 == h
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
