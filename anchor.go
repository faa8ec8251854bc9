package sluice

import (
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/calendar"
)

// MaxAnchorDefinitions bounds the distinct calendar limits that anchors
// named by requests (WithRequestAnchor: a token's claim, a descriptor's
// entry) may define in one process, over every policy and every reload.
// Each adds a definition to the process-wide registry of limit
// definitions, which never shrinks; the bound keeps requests naming ever
// new anchors from growing it without end.
const MaxAnchorDefinitions = 65536

// anchorDefs holds the calendar limits that request anchors defined in the
// process, by algorithm, count and calendar.
var anchorDefs struct {
	sync.Mutex
	m map[string]struct{}
}

// WithRequestAnchor is WithAnchor for an anchor that a request names
// rather than an operator: it returns p and false, applying nothing, when
// the anchored policy would define calendar limits beyond
// MaxAnchorDefinitions distinct ones in the process; an anchor whose
// limits were defined before is always applied. Callers keep what it
// returns per anchor, as WithAnchor's documentation says. It is safe for
// concurrent use.
func (p *Policy) WithRequestAnchor(a calendar.Anchor) (*Policy, bool) {
	if !admitAnchor(p, a) {
		return p, false
	}
	return p.WithAnchor(a), true
}

// admitAnchor reports whether p's limits with anchor a may be built: each
// calendar limit was defined before, or the process holds room for the
// new ones.
func admitAnchor(p *Policy, a calendar.Anchor) bool {
	var keys []string
	for _, l := range p.limits {
		if l.Calendar == nil {
			continue
		}
		var sb strings.Builder
		sb.WriteString(l.Algorithm.String())
		sb.WriteByte(' ')
		sb.WriteString(strconv.FormatInt(l.Count, 10))
		sb.WriteByte(' ')
		sb.WriteString(l.Calendar.WithAnchor(a).String())
		keys = append(keys, sb.String())
	}
	anchorDefs.Lock()
	defer anchorDefs.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := anchorDefs.m[k]; !ok {
			n++
		}
	}
	if n == 0 {
		return true
	}
	if len(anchorDefs.m)+n > MaxAnchorDefinitions {
		return false
	}
	if anchorDefs.m == nil {
		anchorDefs.m = map[string]struct{}{}
	}
	for _, k := range keys {
		anchorDefs.m[k] = struct{}{}
	}
	return true
}
