package sluice_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// fmix64 is MurmurHash3's 64-bit finalizer, written out from its
// definition, to check the documented choice independently.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// documented is the choice as Rollout's documentation states it, built
// from hash/fnv: the reference the implementation must agree with.
func documented(percent float64, name, key string) bool {
	f := fnv.New64a()
	f.Write([]byte(name))
	f.Write([]byte{0})
	f.Write([]byte(key))
	top := fmix64(f.Sum64()) >> 11
	return float64(top) < percent/100*math.Exp2(53)
}

func TestRolloutFollowsItsDocumentation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		name := fmt.Sprintf("rule-%d", rng.IntN(50))
		var kb [12]byte
		binary.LittleEndian.PutUint64(kb[:], rng.Uint64())
		key := string(kb[:rng.IntN(len(kb)+1)])
		pct := float64(rng.IntN(10001)) / 100
		r := &sluice.Rollout{Percent: pct}
		want := pct >= 100 || (pct > 0 && documented(pct, name, key))
		if got := r.Enforces(name, key); got != want {
			t.Fatalf("case %d: Enforces(%q, %q) at %v%% = %v, the documented choice says %v", i, name, key, pct, got, want)
		}
	}
}

// The threshold at which each key becomes enforced is pinned, so that a
// change of the hash (which would move clients in or out of enforcement
// on upgrade) fails here. Each key is enforced at its threshold and above,
// not just below it.
func TestRolloutIsPinned(t *testing.T) {
	for _, c := range []struct {
		name, key string
		hash      uint64 // fmix64(FNV-1a(name, 0, key))
	}{
		{"login", "ip:203.0.113.7", 0x5ca88f94cc37e13c},
		{"login", "ip:203.0.113.8", 0xd54acfd4eefe5385},
		{"api", "user-42", 0xbbd819e34452d5aa},
		{"", "", 0xb9034ad37056f5fb},
		{"api-rollout", "customer-1001", 0x6a4230d477984ddd},
	} {
		// The smallest percentage enforcing the key: just above its
		// position among 2^53.
		pos := float64(c.hash>>11) / math.Exp2(53) * 100
		below, at := &sluice.Rollout{Percent: pos * (1 - 1e-9)}, &sluice.Rollout{Percent: pos * (1 + 1e-9)}
		if below.Enforces(c.name, c.key) || !at.Enforces(c.name, c.key) {
			t.Errorf("(%q, %q): enforced at %v%%: %v, at %v%%: %v; want it to start at %.6f%% (hash %#x)",
				c.name, c.key, below.Percent, below.Enforces(c.name, c.key), at.Percent, at.Enforces(c.name, c.key), pos, c.hash)
		}
	}
}

func TestRolloutBounds(t *testing.T) {
	var none *sluice.Rollout
	if !none.Enforces("r", "k") || !none.Enforces("r", "") || none.Validate() != nil {
		t.Error("a nil Rollout must enforce every key and be valid")
	}
	for i := range 1000 {
		k := fmt.Sprint(i)
		if (&sluice.Rollout{Percent: 0}).Enforces("r", k) {
			t.Fatalf("0%% enforced key %q", k)
		}
		if !(&sluice.Rollout{Percent: 100}).Enforces("r", k) {
			t.Fatalf("100%% did not enforce key %q", k)
		}
	}
	for _, p := range []float64{-1, 100.001, math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := (&sluice.Rollout{Percent: p}).Validate()
		if !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("Validate(%v%%) = %v, want an error wrapping ErrInvalidLimit", p, err)
		}
	}
	for _, p := range []float64{0, 0.001, 50, 100} {
		if err := (&sluice.Rollout{Percent: p}).Validate(); err != nil {
			t.Errorf("Validate(%v%%) = %v, want nil", p, err)
		}
	}
}

// Raising the percentage only adds keys: a key enforced at p is enforced
// at every q > p.
func TestRolloutGrowsMonotonically(t *testing.T) {
	steps := []float64{0, 0.1, 1, 5, 10, 20, 25, 33.3, 50, 75, 99, 99.99, 100}
	for i := range 20000 {
		key := fmt.Sprintf("client-%d", i)
		enforced := false
		for _, p := range steps {
			now := (&sluice.Rollout{Percent: p}).Enforces("orders", key)
			if enforced && !now {
				t.Fatalf("key %q enforced below %v%% but not at it", key, p)
			}
			enforced = now
		}
	}
}

// within reports whether got is within 5 standard deviations of the
// binomial mean n·p: for a fair hash, a miss has a probability below 6e-7.
func within(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > 5*sd {
		t.Errorf("%s: %d of %d keys, want %.0f ± %.0f (5 standard deviations of the binomial)", what, got, n, mean, 5*sd)
	}
}

// Over 100,000 keys the enforced share is the asked one, within 5
// standard deviations of the binomial (±5·sqrt(n·p·(1−p)): ±150 keys at
// 10%, ±250 at 50%), for keys that differ in one character (sequential ids)
// as for addresses; and two rules at the same percentage enforce on
// independent sets of keys (their overlap is p², not p).
func TestRolloutShare(t *testing.T) {
	const n = 100_000
	keySets := map[string]func(i int) string{
		"sequential": func(i int) string { return fmt.Sprintf("user-%d", i) },
		"ipv4":       func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255) },
	}
	for set, key := range keySets {
		for _, p := range []float64{1, 5, 10, 25, 50, 90} {
			r := &sluice.Rollout{Percent: p}
			a, both := 0, 0
			for i := range n {
				k := key(i)
				ea := r.Enforces("checkout", k)
				if ea {
					a++
				}
				if ea && r.Enforces("search", k) {
					both++
				}
			}
			within(t, fmt.Sprintf("%s keys at %v%%", set, p), a, n, p/100)
			within(t, fmt.Sprintf("%s keys at %v%% on two rules", set, p), both, n, p/100*p/100)
		}
	}
}

// The choice is the same in another process: a child process prints its
// answers, which must match this one's.
func TestRolloutSameInAnotherProcess(t *testing.T) {
	if os.Getenv("SLUICE_ROLLOUT_CHILD") == "1" {
		w := bufio.NewWriter(os.Stdout)
		for i := range 2000 {
			fmt.Fprintln(w, (&sluice.Rollout{Percent: 30}).Enforces("export", fmt.Sprintf("key-%d", i)))
		}
		w.Flush()
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRolloutSameInAnotherProcess$")
	cmd.Env = append(os.Environ(), "SLUICE_ROLLOUT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2000 {
		t.Fatalf("the child printed %d answers, want 2000", len(lines))
	}
	for i, l := range lines {
		want := fmt.Sprint((&sluice.Rollout{Percent: 30}).Enforces("export", fmt.Sprintf("key-%d", i)))
		if l != want {
			t.Fatalf("key-%d: the child says %s, this process %s", i, l, want)
		}
	}
}

func BenchmarkRolloutEnforces(b *testing.B) {
	r := &sluice.Rollout{Percent: 25}
	b.ReportAllocs()
	for b.Loop() {
		r.Enforces("checkout", "api-key-0123456789abcdef")
	}
}

// Rolling a limit out: the clients enforced at 5% stay enforced at 50%.
func ExampleRollout() {
	five, fifty := &sluice.Rollout{Percent: 5}, &sluice.Rollout{Percent: 50}
	kept := true
	n5, n50 := 0, 0
	for i := range 10000 {
		k := fmt.Sprintf("customer-%d", i)
		if five.Enforces("orders", k) {
			n5++
			kept = kept && fifty.Enforces("orders", k)
		}
		if fifty.Enforces("orders", k) {
			n50++
		}
	}
	fmt.Println("about 5%:", n5 > 400 && n5 < 600)
	fmt.Println("about 50%:", n50 > 4800 && n50 < 5200)
	fmt.Println("every key of 5% still enforced at 50%:", kept)
	// Output:
	// about 5%: true
	// about 50%: true
	// every key of 5% still enforced at 50%: true
}
