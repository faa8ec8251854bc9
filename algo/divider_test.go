package algo

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// The divider must agree with hardware division for every divisor and
// dividend; check the edges of each divisor's range and random values.
func TestDividerMatchesDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	divisors := []uint64{1, 2, 3, 5, 7, 10, 1 << 20, 1<<20 + 1, 1e9, 333333333, 86400e9, math.MaxUint32, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1, math.MaxUint64}
	for range 2000 {
		divisors = append(divisors, rng.Uint64()>>rng.UintN(64)|1, rng.Uint64()>>rng.UintN(64)+1)
	}
	for _, d := range divisors {
		v := newDivider(d)
		xs := []uint64{0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64 / d * d, math.MaxUint64/d*d - 1}
		for range 200 {
			xs = append(xs, rng.Uint64(), rng.Uint64()>>rng.UintN(64))
		}
		for _, x := range xs {
			if got, want := v.div(x), x/d; got != want {
				t.Fatalf("divider(%d).div(%d) = %d, want %d", d, x, got, want)
			}
		}
		// 128-bit dividends take the hardware path.
		hi := rng.Uint64() % d
		lo := rng.Uint64()
		q, r := v.divmod(u128{hi, lo})
		wq, wr := bits.Div64(hi, lo, d)
		if q != (u128{0, wq}) || r != wr {
			t.Fatalf("divider(%d).divmod(%d:%d) = %v rem %d, want %d rem %d", d, hi, lo, q, r, wq, wr)
		}
	}
}
