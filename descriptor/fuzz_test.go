package descriptor_test

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
)

// FuzzMatch matches arbitrary descriptors, written as "k=v,k=v", against
// the test tree and a tree built from the input's own keys and values: it
// must never panic, must give the same answer twice, and must honour the
// matching rules it can check on its own (a match's depth equals its
// node's, an exact entry always beats a wildcard or default one).
func FuzzMatch(f *testing.F) {
	for _, s := range []string{
		"key1=value1,subkey1=x", "key2=value2", "path=/api/x", "path=/v1/items/2",
		"tenant=a,user=b", "path=", "=", "path=*", "k=v*,k=v", "a=b*c*d,a=bxcyd", ",,,",
	} {
		f.Add(s, "path=/a*b")
	}
	base := mustNew(f, testTree)
	f.Fuzz(func(t *testing.T, request, config string) {
		es := parseEntries(request)
		m1, m2 := base.Match("test", es), base.Match("test", es)
		if m1.Rule != m2.Rule || m1.Key != m2.Key || m1.MetricName() != m2.MetricName() {
			t.Fatalf("%q: two different answers", request)
		}
		if m1.Rule != nil && strings.Count(m1.Rule.MetricKey, ".") != len(es) {
			t.Fatalf("%q: matched %s at another depth", request, m1.Rule.MetricKey)
		}
		ms := []descriptor.Match{m1, m2}
		descriptor.ApplyReplaces(ms)

		// A tree from the config string: each entry becomes a wildcard or
		// exact node, plus a default node for its key.
		var ds []descriptor.Descriptor
		seen := map[string]bool{}
		for _, c := range parseEntries(config) {
			if c.Key == "" {
				continue
			}
			seg := c.Key + "_" + c.Value
			if c.Value == "" {
				seg = c.Key
			}
			if seen[seg] {
				continue
			}
			seen[seg] = true
			ds = append(ds, descriptor.Descriptor{Key: c.Key, Value: c.Value, RateLimit: rl(1, descriptor.Second)})
		}
		s, err := descriptor.New(descriptor.Domain{Name: "f", Descriptors: ds})
		if err != nil {
			return // composite-key collisions such as a_b and a=b
		}
		for _, x := range es {
			m := s.Match("f", []descriptor.Entry{x})
			if m.Rule == nil {
				continue
			}
			if seen[x.Key+"_"+x.Value] && x.Value != "" && m.Rule.MetricKey != "f."+x.Key+"_"+x.Value {
				t.Fatalf("%v: exact entry exists but matched %s", x, m.Rule.MetricKey)
			}
			if !strings.HasPrefix(m.Rule.MetricKey, "f."+x.Key) {
				t.Fatalf("%v: matched another key's entry %s", x, m.Rule.MetricKey)
			}
		}
		if _, err := s.Override("f", es, uint32(len(request)), descriptor.Unit(len(config)%9)); err != nil && descriptor.Unit(len(config)%9).Valid() && !errors.Is(err, descriptor.ErrTooManyOverrides) {
			t.Fatalf("override: %v", err)
		}
	})
}

func parseEntries(s string) []descriptor.Entry {
	if s == "" {
		return nil
	}
	var out []descriptor.Entry
	for p := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(p, "=")
		out = append(out, descriptor.Entry{Key: k, Value: v})
	}
	return out
}

// FuzzDisplay builds limits of any valid count and period and checks that
// their display is exact (RequestsPerUnit per UnitMultiplier units is
// Count per Period) or, when it is not, the documented fallback: Count per
// second, rounded down, at least 1, in 32 bits.
func FuzzDisplay(f *testing.F) {
	for _, c := range [][2]int64{{5, int64(15 * time.Minute)}, {1, int64(1500 * time.Millisecond)}, {5, 1_000_000_007}, {10_000_000_000, int64(24 * time.Hour)}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, count, period int64) {
		l := sluice.Limit{Algorithm: sluice.GCRA, Count: count, Period: time.Duration(period)}
		if l.Validate() != nil {
			return
		}
		s, err := descriptor.New(descriptor.Domain{Name: "f", Descriptors: []descriptor.Descriptor{
			{Key: "k", RateLimit: &descriptor.RateLimit{Limits: []sluice.Limit{l}}},
		}})
		if err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		d := s.Match("f", []descriptor.Entry{{Key: "k", Value: "v"}}).Rule.Displays[0]
		if d.RequestsPerUnit == 0 || d.UnitMultiplier == 0 || !d.Unit.Valid() {
			t.Fatalf("%v: display %+v has a zero or invalid field", l, d)
		}
		// RequestsPerUnit × Period == Count × UnitMultiplier × Unit?
		lhs := new(big.Int).Mul(big.NewInt(int64(d.RequestsPerUnit)), big.NewInt(period))
		rhs := new(big.Int).Mul(big.NewInt(count), big.NewInt(int64(d.UnitMultiplier)))
		rhs.Mul(rhs, big.NewInt(int64(d.Unit.Duration())))
		if lhs.Cmp(rhs) == 0 {
			return
		}
		perSecond := new(big.Int).Quo(new(big.Int).Mul(big.NewInt(count), big.NewInt(int64(time.Second))), big.NewInt(period))
		want := max(1, min(perSecond.Int64(), math.MaxUint32))
		if !perSecond.IsInt64() {
			want = math.MaxUint32
		}
		if d.Unit != descriptor.Second || d.UnitMultiplier != 1 || int64(d.RequestsPerUnit) != want {
			t.Fatalf("%v: display %+v is neither exact nor %d per second", l, d, want)
		}
	})
}
