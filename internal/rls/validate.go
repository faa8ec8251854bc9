package rls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// validate checks req against the service's bounds and returns the number
// of entries of all its descriptors, or an error wrapping
// ErrInvalidRequest that says what is wrong and where.
func (s *Service) validate(req *rlsv3.RateLimitRequest) (int, error) {
	o := &s.opts
	if req == nil {
		return 0, fmt.Errorf("%w: no request", ErrInvalidRequest)
	}
	switch {
	case req.Domain == "":
		return 0, fmt.Errorf("%w: empty domain", ErrInvalidRequest)
	case len(req.Domain) > maxDomainBytes:
		return 0, fmt.Errorf("%w: domain of %d bytes (at most %d)", ErrInvalidRequest, len(req.Domain), maxDomainBytes)
	case len(req.Descriptors) == 0:
		return 0, fmt.Errorf("%w: no descriptors", ErrInvalidRequest)
	case len(req.Descriptors) > o.MaxDescriptors:
		return 0, fmt.Errorf("%w: %d descriptors (at most %d)", ErrInvalidRequest, len(req.Descriptors), o.MaxDescriptors)
	case uint64(req.HitsAddend) > o.MaxHitsAddend:
		return 0, fmt.Errorf("%w: hits_addend %d (at most %d)", ErrInvalidRequest, req.HitsAddend, o.MaxHitsAddend)
	}
	n := 0
	for i, d := range req.Descriptors {
		switch {
		case d == nil:
			return 0, fmt.Errorf("%w: descriptors[%d] is null", ErrInvalidRequest, i)
		case len(d.Entries) == 0:
			return 0, fmt.Errorf("%w: descriptors[%d] has no entries", ErrInvalidRequest, i)
		case len(d.Entries) > o.MaxEntries:
			return 0, fmt.Errorf("%w: descriptors[%d] has %d entries (at most %d)", ErrInvalidRequest, i, len(d.Entries), o.MaxEntries)
		case d.IsNegativeHits:
			return 0, fmt.Errorf("%w: descriptors[%d]: is_negative_hits is not supported", ErrInvalidRequest, i)
		case d.HitsAddend != nil && d.HitsAddend.Value > o.MaxHitsAddend:
			return 0, fmt.Errorf("%w: descriptors[%d].hits_addend %d (at most %d)", ErrInvalidRequest, i, d.HitsAddend.Value, o.MaxHitsAddend)
		}
		if l := d.Limit; l != nil {
			if m := l.UnitMultiplier; m != nil && m.Value != 1 {
				return 0, fmt.Errorf("%w: descriptors[%d].limit.unit_multiplier %d is not supported (only 1)", ErrInvalidRequest, i, m.Value)
			}
		}
		for j, e := range d.Entries {
			switch {
			case e == nil:
				return 0, fmt.Errorf("%w: descriptors[%d].entries[%d] is null", ErrInvalidRequest, i, j)
			case e.Key == "":
				return 0, fmt.Errorf("%w: descriptors[%d].entries[%d] has an empty key", ErrInvalidRequest, i, j)
			case len(e.Key) > o.MaxValueBytes:
				return 0, fmt.Errorf("%w: descriptors[%d].entries[%d].key of %d bytes (at most %d)", ErrInvalidRequest, i, j, len(e.Key), o.MaxValueBytes)
			case len(e.Value) > o.MaxValueBytes:
				return 0, fmt.Errorf("%w: descriptors[%d].entries[%d].value of %d bytes (at most %d)", ErrInvalidRequest, i, j, len(e.Value), o.MaxValueBytes)
			}
		}
		n += len(d.Entries)
	}
	return n, nil
}
