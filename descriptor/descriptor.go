// Package descriptor is the rule tree of the Envoy rate-limit service
// (envoyproxy/ratelimit): domains of nested descriptor entries, each of which
// may carry a rate limit, and the matching of a request's descriptors
// against them, with Sluice's algorithms behind every limit.
//
// A Set is built once from its Domains (New) and is then immutable and safe
// for concurrent use; a configuration reload builds a new Set. Every node with
// a limit gets its sluice.Policy when the Set is built, named after the
// node's path in the tree (such as "messaging/message_type_marketing/to_number"),
// so that a Set rebuilt from the same configuration keeps the same counters.
//
// # Matching
//
// A request names a domain and carries descriptors, each an ordered list of
// key/value entries. Match walks one descriptor down the domain's tree, one
// entry per level, and at each level takes, for the entry's key:
//
//  1. the entry with exactly that value;
//  2. otherwise the first wildcard entry, in configuration order, whose value
//     matches (a value with a "*" is a pattern in which every "*" stands for
//     any run of characters, so "foo*" matches every value starting with "foo");
//  3. otherwise the key's default entry, the one without a value.
//
// If an entry finds nothing, nothing applies. The limit that applies is that
// of the node reached by the descriptor's last entry: a descriptor longer or
// shorter than the path to a limit matches no limit. A node without a limit
// is an allow-list entry (no limit applies), and an unlimited node is never
// limited.
//
// # Counters
//
// A node's counter is split by the values its path matched through a default
// entry or a wildcard entry: each value of a key-only entry gets its own
// counter, and so does each value a wildcard matches, as in envoyproxy/ratelimit,
// unless the wildcard entry sets ShareThreshold, in which case every value
// it matches shares one counter. Match.Key is that counter key, for use with
// Rule.Policy.
//
// # Penalties and lists
//
// A RateLimit's Penalty goes into its rule's policy (sluice.Policy.WithPenalty),
// so the store blocks a counter key that keeps being denied. A Set may carry
// allow and deny lists of entry values (WithLists), which the service
// consults before matching: Denied and AllowListedBy.
package descriptor

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

// ErrInvalid is wrapped by every error New returns for a tree that cannot be
// built.
var ErrInvalid = errors.New("descriptor: invalid rule tree")

// Unit is the unit of an Envoy rate limit. Its values are those of the
// RateLimitResponse.RateLimit.Unit enum of Envoy's rls.proto (v3), so the
// service converts between them with a plain conversion.
type Unit int32

// The units, with the fixed lengths envoyproxy/ratelimit gives them.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1 // 1s
	Minute      Unit = 2 // 60s
	Hour        Unit = 3 // 3600s
	Day         Unit = 4 // 86400s
	Month       Unit = 5 // 30 days
	Year        Unit = 6 // 365 days
	Week        Unit = 7 // 7 days
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "month", "year", "week"}

var unitLengths = [...]time.Duration{0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	30 * 24 * time.Hour, 365 * 24 * time.Hour, 7 * 24 * time.Hour}

// ParseUnit returns the unit with the given name, in any case: second,
// minute, hour, day, week, month or year.
func ParseUnit(s string) (Unit, error) {
	for u := Second; u <= Week; u++ {
		if strings.EqualFold(s, unitNames[u]) {
			return u, nil
		}
	}
	return UnitUnknown, fmt.Errorf("descriptor: unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// String returns the unit's configuration name, such as "minute".
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return fmt.Sprintf("unit(%d)", int32(u))
	}
	return unitNames[u]
}

// Valid reports whether u is one of the seven units.
func (u Unit) Valid() bool { return u >= Second && u <= Week }

// Duration returns the unit's length, or 0 for an invalid unit.
func (u Unit) Duration() time.Duration {
	if !u.Valid() {
		return 0
	}
	return unitLengths[u]
}

// Entry is one key/value pair of a request's descriptor. Its JSON form is
// {"key": ..., "value": ...}, as in Envoy's descriptors.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Domain is the rule tree of one domain, as a configuration writes it.
type Domain struct {
	// Name is the domain; required and unique within a Set.
	Name string
	// Descriptors is the tree's top level.
	Descriptors []Descriptor
}

// Descriptor is one node of a rule tree, as a configuration writes it.
type Descriptor struct {
	// Key is the entry's key. Required.
	Key string
	// Value is the entry's value: empty for the key's default entry, which
	// matches any value and counts each value apart; a value containing "*"
	// is a wildcard pattern; any other value matches exactly.
	Value string
	// RateLimit is the node's limit; nil for none (an allow-list entry, or
	// a node that only holds nested descriptors).
	RateLimit *RateLimit
	// ShadowMode makes the node's limit report, never deny.
	ShadowMode bool
	// Enforce, if set, enforces the node's limit on only a share of its
	// counters, chosen by the counter's key (Match.Key) and salted with the
	// node's MetricKey (see sluice.Rollout); the others run in shadow
	// mode. Nil enforces every counter. Only for a node with a limit (not
	// unlimited, not in shadow mode) whose path counts some level per
	// value (a default entry, or a wildcard without ShareThreshold): a
	// node counted as one counter has no share of keys to choose from.
	Enforce *sluice.Rollout
	// DetailedMetric puts the request's value in the metric name of a node
	// reached through a default or wildcard entry (see Match.MetricName).
	DetailedMetric bool
	// ValueToMetric puts the request's values in place of every default or
	// wildcard entry of the node's path in its metric name.
	ValueToMetric bool
	// ShareThreshold makes every value a wildcard entry matches share one
	// counter instead of one counter per value. Only for wildcard entries.
	ShareThreshold bool
	// QuotaMode makes the limit a soft one, as envoyproxy/ratelimit's
	// quota_mode: counted, never denying (see Match.Shadow), its
	// violations reported to the caller (the service puts them in the
	// response's dynamic metadata).
	QuotaMode bool
	// Descriptors are the nested entries, matched by the descriptor's next
	// entry.
	Descriptors []Descriptor
}

// RateLimit is a node's limit. Either Unlimited, or RequestsPerUnit per
// Unit (envoyproxy/ratelimit's form, a fixed window aligned to the Unix
// epoch as there), or Limits (Sluice's form: any algorithm, period and burst,
// up to sluice.MaxLimits limits charged together).
type RateLimit struct {
	// RequestsPerUnit and Unit are the limit in envoyproxy/ratelimit's
	// form; zero requests per unit deny every request.
	RequestsPerUnit uint32
	Unit            Unit
	// Limits, when not empty, are the node's limits instead of
	// RequestsPerUnit and Unit. A limit with a Calendar is a calendar
	// quota: its Display is in the protocol's unit of its period (DAY,
	// WEEK, MONTH, YEAR), and Rule.WithAnchor counts it from a client's
	// anchor. Unit Month and Year stay fixed windows of 30 and 365 days.
	Limits []sluice.Limit
	// Unlimited means never limited; it takes no unit, count or Limits.
	Unlimited bool
	// Name names the limit for Replaces; optional.
	Name string
	// Replaces lists names of limits that this one replaces when both apply
	// to one request (see ApplyReplaces).
	Replaces []string
	// Penalty, if set, blocks a counter key that keeps being denied, for
	// longer on every offence (see sluice.Penalty): the rule's policy
	// carries it (sluice.Policy.WithPenalty), so a blocked key is denied
	// until the block ends, whatever its limits say. Not for an unlimited
	// rate limit nor for zero requests per unit (nothing is counted to
	// strike). A request's own limit (Set.Override) and an operator's
	// (KeyOverride) replace the rule and its penalty.
	Penalty *sluice.Penalty
	// Sync is how a store shared between processes keeps the limit's
	// counters in step (see sluice.Policy.WithSync); the zero value is
	// exact. Lease and async need token_bucket, gcra or fixed_window
	// limits, and no penalty.
	Sync sluice.Sync
}

// Display is one limit of a rule as the Envoy protocol shows it in
// current_limit, and as rate-limit headers show it.
type Display struct {
	// Count per Period is the limit itself.
	Count  int64
	Period time.Duration
	// RequestsPerUnit per UnitMultiplier × Unit is the limit in the
	// protocol's form (RLS v3's RateLimit: requests_per_unit, unit and
	// unit_multiplier). It is exact whenever the protocol can say it: Count
	// per the longest unit that divides Period a whole number of times (5
	// per 15 minutes is 5 per 15 MINUTE, 1000 per 14 days 1000 per 2
	// WEEK); for a Period that is not a whole number of seconds, the
	// reduced fraction of Count per Period in seconds (1 per 1.5 s is 2 per
	// 3 SECOND). Only when no such form fits in 32 bits is it Count scaled
	// to a second, rounded down, at least 1. UnitMultiplier is at least 1;
	// the service sends it only when it is not 1, the protocol's default.
	RequestsPerUnit uint32
	Unit            Unit
	UnitMultiplier  uint32
}

// Rule is the limit of one node of a built Set. It is immutable.
type Rule struct {
	// Domain is the rule's domain.
	Domain string
	// Name and Replaces are the rate limit's name and the names it replaces.
	Name     string
	Replaces []string
	// Policy decides the rule's requests, keyed by Match.Key. Nil when
	// Unlimited or DenyAll.
	Policy *sluice.Policy
	// Unlimited rules never limit; DenyAll rules (zero requests per unit)
	// deny every request.
	Unlimited, DenyAll bool
	// ShadowMode, QuotaMode, DetailedMetric and ValueToMetric are the
	// node's flags.
	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric bool
	// Enforce is the node's Enforce: nil enforces every counter (see
	// Match.Shadow).
	Enforce *sluice.Rollout
	// MetricKey is the node's name for metrics, as envoyproxy/ratelimit
	// forms it: the domain and each level's key or key_value, joined by
	// dots ("messaging.message_type_marketing.to_number").
	MetricKey string
	// Displays holds one entry per limit of Policy (one for a DenyAll
	// rule, none for an unlimited one).
	Displays []Display

	segments []string // per level: key or key_value, as in MetricKey
	variable []bool   // per level: matched through a default or wildcard entry
	override bool     // built for a request's own limit
	// anchors holds the rule's copies for the billing anchors requests
	// named (WithAnchor); nil unless a limit is a calendar quota.
	anchors *anchorCache
}

// displayOf returns the display of l: for a calendar quota, Count per its
// calendar unit (day, week, month or year), with the unit's nominal length
// (a month 30 days, a year 365, as the protocol's units) as Period.
func displayOf(l sluice.Limit) Display {
	if l.Calendar == nil {
		return display(l.Count, l.Period)
	}
	u := calendarUnits[l.Calendar.Spec().Unit]
	return Display{Count: l.Count, Period: u.Duration(), RequestsPerUnit: uint32(min(l.Count, math.MaxUint32)), Unit: u, UnitMultiplier: 1}
}

// calendarUnits maps a calendar unit to the protocol's unit of that name.
var calendarUnits = map[calendar.Unit]Unit{calendar.Day: Day, calendar.Week: Week, calendar.Month: Month, calendar.Year: Year}

// unitsByLength are the units from the longest to the shortest.
var unitsByLength = [...]Unit{Year, Month, Week, Day, Hour, Minute, Second}

// display returns the Display of count per period; see Display for the
// forms it takes.
func display(count int64, period time.Duration) Display {
	d := Display{Count: count, Period: period, UnitMultiplier: 1}
	if period <= 0 {
		return d
	}
	if count <= math.MaxUint32 {
		for _, u := range unitsByLength {
			if n := period / u.Duration(); period%u.Duration() == 0 && n <= math.MaxUint32 {
				d.RequestsPerUnit, d.Unit, d.UnitMultiplier = uint32(count), u, uint32(n)
				return d
			}
		}
	}
	// count per period is (count × 1e9) / period(ns) per second, reduced.
	num := new(big.Int).Mul(big.NewInt(count), big.NewInt(int64(time.Second)))
	den := big.NewInt(int64(period))
	g := new(big.Int).GCD(nil, nil, num, den)
	num.Quo(num, g)
	den.Quo(den, g)
	if num.IsUint64() && num.Uint64() <= math.MaxUint32 && den.Uint64() <= math.MaxUint32 {
		d.RequestsPerUnit, d.Unit, d.UnitMultiplier = uint32(num.Uint64()), Second, uint32(den.Uint64())
		return d
	}
	// No exact form fits: count per second, rounded down, at least 1.
	hi, lo := bits.Mul64(uint64(count), uint64(time.Second))
	if hi >= uint64(period) { // the quotient would not fit in 64 bits
		d.RequestsPerUnit, d.Unit = math.MaxUint32, Second
		return d
	}
	q, _ := bits.Div64(hi, lo, uint64(period))
	d.RequestsPerUnit, d.Unit = uint32(max(1, min(q, math.MaxUint32))), Second
	return d
}
