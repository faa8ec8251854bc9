package descriptor

import (
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/calendar"
)

// MaxAnchors is the most billing anchors from requests (WithAnchor) that a
// rule keeps: a month has 44,640 minutes, and each anchor is a limit
// definition of its own, so the bound keeps memory in check whatever
// values requests carry.
const MaxAnchors = 4096

// anchorCache is a rule's copies by billing anchor, built on first use. It
// is safe for concurrent use.
type anchorCache struct {
	m sync.Map // calendar.Anchor → *Rule
	n atomic.Int64
}

// WithAnchor returns the rule with a client's billing anchor applied to its
// calendar quotas (see sluice.Policy.WithAnchor): a copy whose policy keeps
// the rule's name, and so its counters, with every calendar period counted
// from a. It returns r itself when r has no calendar quota (an operator's
// override, a request's own limit, a rule of durations), when a changes
// none of its periods, or when MaxAnchors other anchors are kept for r
// already (or the process holds sluice.MaxAnchorDefinitions anchored limits).
// The copies are kept with r, so a request's anchor costs one map lookup
// after its first use. It is safe for concurrent use.
func (r *Rule) WithAnchor(a calendar.Anchor) *Rule {
	c := r.anchors
	if c == nil || r.Policy == nil {
		return r
	}
	if v, ok := c.m.Load(a); ok {
		return v.(*Rule)
	}
	if c.n.Load() >= MaxAnchors {
		return r
	}
	p, ok := r.Policy.WithRequestAnchor(a)
	if !ok {
		return r
	}
	out := r
	if p != r.Policy {
		cp := *r
		cp.Policy, cp.anchors = p, nil
		out = &cp
	}
	v, loaded := c.m.LoadOrStore(a, out)
	if !loaded {
		c.n.Add(1)
	}
	return v.(*Rule)
}
