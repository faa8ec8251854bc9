package descriptor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
)

// Match.Shadow follows the rule's Enforce, keyed by the counter key and
// salted with the metric key; overrides are always enforced.
func TestMatchShadowFollowsEnforce(t *testing.T) {
	roll := &sluice.Rollout{Percent: 40}
	set, err := descriptor.New(descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "user", RateLimit: rl(5, descriptor.Minute), Enforce: roll},
		{Key: "tenant", Descriptors: []descriptor.Descriptor{{Key: "user", RateLimit: rl(5, descriptor.Minute), Enforce: roll}}},
		{Key: "quiet", RateLimit: rl(5, descriptor.Minute), ShadowMode: true},
		{Key: "plain", RateLimit: rl(5, descriptor.Minute)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	shadows := 0
	for i := range 1000 {
		u := fmt.Sprint("u", i)
		m := set.Match("d", []descriptor.Entry{{Key: "user", Value: u}})
		if got, want := m.Shadow(), !roll.Enforces("d.user", u); got != want {
			t.Fatalf("user %s: Shadow() = %v, want %v", u, got, want)
		}
		if m.Shadow() {
			shadows++
		}
		m = set.Match("d", []descriptor.Entry{{Key: "tenant", Value: "t" + u}, {Key: "user", Value: u}})
		if got, want := m.Shadow(), !roll.Enforces("d.tenant.user", m.Key); got != want {
			t.Fatalf("tenant/user %s: Shadow() = %v, want %v (key %q)", u, got, want, m.Key)
		}
		if !set.Match("d", []descriptor.Entry{{Key: "quiet", Value: u}}).Shadow() {
			t.Fatal("a shadow_mode rule is not Shadow")
		}
		if set.Match("d", []descriptor.Entry{{Key: "plain", Value: u}}).Shadow() {
			t.Fatal("a rule without Enforce is Shadow")
		}
	}
	if shadows < 540 || shadows > 660 { // 600 ± 5 standard deviations (15.5)
		t.Errorf("%d of 1000 users in shadow mode at 40%% enforced", shadows)
	}
	if (descriptor.Match{}).Shadow() {
		t.Error("a match without a rule is Shadow")
	}
	o, err := set.Override("d", []descriptor.Entry{{Key: "user", Value: "x"}}, 3, descriptor.Minute)
	if err != nil || o.Shadow() {
		t.Errorf("a request's own limit: Shadow() = %v, %v; want enforced", o.Shadow(), err)
	}
}

func TestEnforceProblems(t *testing.T) {
	roll := &sluice.Rollout{Percent: 10}
	for _, c := range []struct {
		name string
		d    descriptor.Descriptor
		want string
	}{
		{"one counter", descriptor.Descriptor{Key: "k", Value: "v", RateLimit: rl(1, descriptor.Second), Enforce: roll}, "enforce needs a level counted per value"},
		{"no limit", descriptor.Descriptor{Key: "k", Enforce: roll}, "enforce needs a rate_limit"},
		{"unlimited", descriptor.Descriptor{Key: "k", RateLimit: &descriptor.RateLimit{Unlimited: true}, Enforce: roll}, "not for an unlimited"},
		{"shadow", descriptor.Descriptor{Key: "k", ShadowMode: true, RateLimit: rl(1, descriptor.Second), Enforce: roll}, "enforce with shadow_mode"},
		{"range", descriptor.Descriptor{Key: "k", RateLimit: rl(1, descriptor.Second), Enforce: &sluice.Rollout{Percent: 120}}, "want 0 to 100"},
	} {
		_, err := descriptor.New(descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{c.d}})
		if !errors.Is(err, descriptor.ErrInvalid) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: New() = %v, want an ErrInvalid saying %q", c.name, err, c.want)
		}
	}
}
