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
