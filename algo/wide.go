package algo

import "math/bits"

// u128 is an unsigned 128-bit integer. The algorithms multiply counts by
// periods in nanoseconds; the products exceed 64 bits for long periods and
// large counts, so they are formed and compared in 128 bits and never
// rounded.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func wide(a uint64) u128 { return u128{0, a} }

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

// sub returns x-y; the caller guarantees x >= y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

// subFloor returns x-y, or zero when y > x.
func (x u128) subFloor(y u128) u128 {
	if x.less(y) {
		return u128{}
	}
	return x.sub(y)
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

func (x u128) isZero() bool { return x.hi == 0 && x.lo == 0 }

// divmod returns the quotient and remainder of x/d for d > 0.
func (x u128) divmod(d uint64) (u128, uint64) {
	if x.hi == 0 { // one 64-bit division instead of two
		if d == 1 {
			return x, 0
		}
		return u128{0, x.lo / d}, x.lo % d
	}
	qhi, r := x.hi/d, x.hi%d
	qlo, r := bits.Div64(r, x.lo, d)
	return u128{qhi, qlo}, r
}

// div returns floor(x/d) saturated to the int64 range.
func (x u128) div(d uint64) int64 {
	q, _ := x.divmod(d)
	return q.int64()
}

// divCeil returns ceil(x/d) saturated to the int64 range.
func (x u128) divCeil(d uint64) int64 {
	q, r := x.divmod(d)
	if r != 0 {
		q = q.add(wide(1))
	}
	return q.int64()
}

// int64 returns x saturated to the int64 range.
func (x u128) int64() int64 {
	if x.hi != 0 || x.lo > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(x.lo)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// floorDiv returns floor(a/b) for b > 0, rounding towards negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// divider divides by a fixed divisor with a multiplication and shifts
// instead of a hardware division, which costs 40 to 90 cycles on common
// x86 cores; every rule divides by the same few numbers on every decision.
// It is exact for every 64-bit dividend (Granlund and Montgomery, "Division
// by invariant integers using multiplication", 1994, the round-up variant
// with a 65-bit magic number).
type divider struct {
	d     uint64
	magic uint64 // the low 64 bits of the 65-bit magic number
	shift uint8  // for powers of two: log2(d); otherwise ceil(log2(d)) − 1
	kind  uint8
}

const (
	divOne = iota
	divPow2
	divMagic
)

func newDivider(d uint64) divider {
	switch {
	case d == 1:
		return divider{d: 1, kind: divOne}
	case d&(d-1) == 0:
		return divider{d: d, shift: uint8(bits.TrailingZeros64(d)), kind: divPow2}
	}
	l := uint(bits.Len64(d)) // 2^(l-1) < d < 2^l
	// magic = floor(2^(64+l)/d) + 1 − 2^64 = floor((2^l − d)·2^64/d) + 1
	q, _ := bits.Div64((1<<l)-d, 0, d)
	return divider{d: d, magic: q + 1, shift: uint8(l - 1), kind: divMagic}
}

// div returns floor(x/d).
func (v *divider) div(x uint64) uint64 {
	switch v.kind {
	case divOne:
		return x
	case divPow2:
		return x >> v.shift
	}
	t, _ := bits.Mul64(v.magic, x)
	return (((x - t) >> 1) + t) >> v.shift
}

// divmod returns the quotient and remainder of x/d.
func (v *divider) divmod(x u128) (u128, uint64) {
	if x.hi != 0 {
		return x.divmod(v.d)
	}
	q := v.div(x.lo)
	return u128{0, q}, x.lo - q*v.d
}

// divCeil returns ceil(x/d) saturated to the int64 range.
func (v *divider) divCeil(x u128) int64 {
	q, r := v.divmod(x)
	if r != 0 {
		q = q.add(wide(1))
	}
	return q.int64()
}
