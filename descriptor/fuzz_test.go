package descriptor_test

import (
	"errors"
	"strings"
	"testing"

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
