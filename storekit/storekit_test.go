package storekit_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storekit"
)

// A limit's identity is its policy's name and its index, whatever its
// definition: a changed definition under the same name keeps the identity
// (stores carry the state) and gets another definition number; equal
// definitions get equal numbers under any name, and DefRule returns the
// compiled rule of a number.
func TestPolicyIdentity(t *testing.T) {
	gcra := sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second}
	fixed := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Second}
	a, _ := sluice.NewPolicy("p", gcra)
	b, _ := sluice.NewPolicy("p", gcra)
	c, _ := sluice.NewPolicy("p", fixed, gcra)
	d, _ := sluice.NewPolicy("q", gcra)
	if storekit.Of(a).ID(0) != "p|0" || storekit.Of(c).ID(1) != "p|1" {
		t.Errorf("IDs %q and %q, want \"p|0\" and \"p|1\"", storekit.Of(a).ID(0), storekit.Of(c).ID(1))
	}
	if storekit.Of(a).Slot(0) != storekit.Of(b).Slot(0) || storekit.Of(a).Def(0) != storekit.Of(b).Def(0) {
		t.Errorf("equal policies have slots %d/%d and definitions %d/%d, want equal", storekit.Of(a).Slot(0), storekit.Of(b).Slot(0), storekit.Of(a).Def(0), storekit.Of(b).Def(0))
	}
	if storekit.Of(a).Slot(0) != storekit.Of(c).Slot(0) || storekit.Of(a).Def(0) == storekit.Of(c).Def(0) {
		t.Errorf("a changed definition under the same name: slots %d/%d (want equal), definitions %d/%d (want different)", storekit.Of(a).Slot(0), storekit.Of(c).Slot(0), storekit.Of(a).Def(0), storekit.Of(c).Def(0))
	}
	if storekit.Of(c).Slot(1) == storekit.Of(c).Slot(0) || storekit.Of(c).Def(1) != storekit.Of(a).Def(0) {
		t.Errorf("limit 1 of p: slot %d (want other than limit 0's %d), definition %d (want %d, as p's gcra limit)", storekit.Of(c).Slot(1), storekit.Of(c).Slot(0), storekit.Of(c).Def(1), storekit.Of(a).Def(0))
	}
	if storekit.Of(a).Slot(0) == storekit.Of(d).Slot(0) || storekit.Of(a).Def(0) != storekit.Of(d).Def(0) {
		t.Errorf("another name, the same limit: slots %d/%d (want different), definitions %d/%d (want equal)", storekit.Of(a).Slot(0), storekit.Of(d).Slot(0), storekit.Of(a).Def(0), storekit.Of(d).Def(0))
	}
	for _, p := range []*sluice.Policy{a, c} {
		for i := range p.Len() {
			if r := storekit.DefRule(storekit.Of(p).Def(i)); r == nil || !r.Equal(storekit.Of(p).Rule(i)) {
				t.Errorf("DefRule(%d) = %v, want %v", storekit.Of(p).Def(i), r, storekit.Of(p).Rule(i))
			}
		}
	}
	if r := storekit.DefRule(0); r != nil {
		t.Errorf("DefRule(0) = %v, want nil", r)
	}
}

// Two requests for one key under policies of the same name share a limit's
// state whatever the limits' definitions, so a batch may not hold both.
