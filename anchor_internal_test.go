package sluice

import (
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/calendar"
)

// Request anchors define calendar limits in a process-wide registry that
// never shrinks: once MaxAnchorDefinitions are defined, an anchor that
// would define another is refused, while one defined before is still
// applied, to a new policy too (a reload).
func TestRequestAnchorBound(t *testing.T) {
	monthly, err := calendar.New(calendar.Spec{Unit: calendar.Month})
	if err != nil {
		t.Fatal(err)
	}
	build := func() *Policy {
		p, err := NewPolicy("bound", Limit{Algorithm: FixedWindow, Count: 77, Calendar: monthly})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	known, _ := calendar.ParseAnchor("03T04:05")
	fresh, _ := calendar.ParseAnchor("06T07:08")
	p := build()
	if q, ok := p.WithRequestAnchor(known); !ok || q == p {
		t.Fatal("an anchor was not applied below the bound")
	}
	anchorDefs.Lock()
	saved := anchorDefs.m
	full := make(map[string]struct{}, MaxAnchorDefinitions)
	for k := range saved {
		full[k] = struct{}{}
	}
	for i := 0; len(full) < MaxAnchorDefinitions; i++ {
		full["filler "+strconv.Itoa(i)] = struct{}{}
	}
	anchorDefs.m = full
	anchorDefs.Unlock()
	t.Cleanup(func() {
		anchorDefs.Lock()
		anchorDefs.m = saved
		anchorDefs.Unlock()
	})
	p = build()
	if q, ok := p.WithRequestAnchor(fresh); ok || q != p {
		t.Error("a new anchor was applied beyond the process's bound")
	}
	if q, ok := p.WithRequestAnchor(known); !ok || q == p {
		t.Error("an anchor defined before the bound was reached is no longer applied")
	}
	if q := p.WithAnchor(fresh); q == p {
		t.Error("WithAnchor (an operator's anchor) is bounded too; want it applied")
	}
}
