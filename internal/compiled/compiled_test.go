package compiled

import (
	"fmt"
	"testing"
)

// TestMayLog: an identity may have sliding-log state once marked, and
// never before, whatever the marks around it; an in-process store skips
// looking among its logs for the others.
func TestMayLog(t *testing.T) {
	var slots []uint32
	for i := range 200 {
		slots = append(slots, SlotOf(fmt.Sprintf("TestMayLog|%d", i)))
	}
	marked := map[uint32]bool{}
	for _, i := range []int{3, 64, 65, 199, 0, 130} {
		for _, s := range slots {
			if got := MayLog(s); got != marked[s] {
				t.Fatalf("MayLog(%d) = %v before marking slot %d, want %v", s, got, slots[i], marked[s])
			}
		}
		MarkLog(slots[i])
		MarkLog(slots[i]) // twice: no change
		marked[slots[i]] = true
	}
	if MayLog(1 << 30) {
		t.Error("MayLog of a slot beyond every mark = true, want false")
	}
}
