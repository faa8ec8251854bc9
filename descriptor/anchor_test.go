package descriptor

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// A calendar quota shows in the protocol's unit of its period (MONTH, not
// seconds scaled down), and WithAnchor gives the rule a copy counting from
// a client's anchor under the same policy name; rules without a calendar
// quota are returned as they are.
func TestCalendarRule(t *testing.T) {
	monthly, err := calendar.New(calendar.Spec{Unit: calendar.Month})
	if err != nil {
		t.Fatal(err)
	}
	set, err := New(Domain{Name: "d", Descriptors: []Descriptor{
		{Key: "quota", RateLimit: &RateLimit{Limits: []sluice.Limit{
			{Algorithm: sluice.GCRA, Count: 5, Period: time.Second},
			{Algorithm: sluice.FixedWindow, Count: 1000, Calendar: monthly},
		}}},
		{Key: "plain", RateLimit: &RateLimit{RequestsPerUnit: 3, Unit: Month}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := set.Match("d", []Entry{{Key: "quota", Value: "a"}}).Rule
	if d := r.Displays[1]; d.Unit != Month || d.RequestsPerUnit != 1000 || d.Period != 30*24*time.Hour {
		t.Errorf("display %+v, want 1000 per MONTH", d)
	}
	a, err := calendar.ParseAnchor("15T09:00")
	if err != nil {
		t.Fatal(err)
	}
	ar := r.WithAnchor(a)
	if ar == r || ar.Policy.Name() != r.Policy.Name() || ar.Policy.Limits()[1].Calendar.Spec().Anchor != a {
		t.Fatalf("anchored rule %+v", ar)
	}
	if r.WithAnchor(a) != ar {
		t.Error("the anchored rule is built again instead of kept")
	}
	if ar.WithAnchor(a) != ar {
		t.Error("an anchored rule is anchored again")
	}
	plain := set.Match("d", []Entry{{Key: "plain", Value: "a"}}).Rule
	if plain.WithAnchor(a) != plain || plain.Policy.Limits()[0].Calendar != nil {
		t.Error("unit: month is anchored; it is envoyproxy/ratelimit's 30 days")
	}
}
