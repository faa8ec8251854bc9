package descriptor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storekit"
)

func rl(n uint32, u descriptor.Unit) *descriptor.RateLimit {
	return &descriptor.RateLimit{RequestsPerUnit: n, Unit: u}
}

func named(name string, n uint32, u descriptor.Unit, replaces ...string) *descriptor.RateLimit {
	return &descriptor.RateLimit{RequestsPerUnit: n, Unit: u, Name: name, Replaces: replaces}
}

// testTree follows the shape of envoyproxy/ratelimit's documented examples.
var testTree = descriptor.Domain{
	Name: "test",
	Descriptors: []descriptor.Descriptor{
		{Key: "key1", Value: "value1", Descriptors: []descriptor.Descriptor{
			{Key: "subkey1", RateLimit: rl(5, descriptor.Second)},
			{Key: "subkey1", Value: "subvalue1", RateLimit: rl(10, descriptor.Second)},
		}},
		{Key: "key2", RateLimit: rl(20, descriptor.Minute)},
		{Key: "key2", Value: "value2", RateLimit: rl(30, descriptor.Minute)},
		{Key: "key2", Value: "value3"}, // allow-listed
		{Key: "key3", RateLimit: rl(1, descriptor.Hour)},
		{Key: "key5", Value: "value5", RateLimit: rl(15, descriptor.Day), Descriptors: []descriptor.Descriptor{
			{Key: "subkey5", Value: "subvalue5", RateLimit: rl(25, descriptor.Day)},
		}},
		{Key: "key6", RateLimit: &descriptor.RateLimit{Unlimited: true}},
		{Key: "banned", RateLimit: rl(0, descriptor.Minute)},
		{Key: "path", Value: "/api/*", RateLimit: rl(40, descriptor.Minute)},
		{Key: "path", Value: "/api/admin*", RateLimit: rl(41, descriptor.Minute)}, // after /api/*: never reached
		{Key: "path", Value: "/api/users", RateLimit: rl(42, descriptor.Minute)},
		{Key: "path", Value: "/static/*", ShareThreshold: true, RateLimit: rl(43, descriptor.Minute)},
		{Key: "path", Value: "*.png", RateLimit: rl(44, descriptor.Minute)},
		{Key: "path", Value: "/v*/items/*", RateLimit: rl(45, descriptor.Minute)},
		{Key: "path", RateLimit: rl(46, descriptor.Minute)},
		{Key: "tenant", Descriptors: []descriptor.Descriptor{
			{Key: "user", RateLimit: rl(47, descriptor.Week)},
			{Key: "plan", Value: "gold", RateLimit: rl(48, descriptor.Month)},
			{Key: "file", Value: "f*", ShareThreshold: true, RateLimit: rl(49, descriptor.Year)},
		}},
	},
}

func mustNew(t testing.TB, ds ...descriptor.Domain) *descriptor.Set {
	t.Helper()
	s, err := descriptor.New(ds...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func e(kv ...string) []descriptor.Entry {
	var out []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestMatch(t *testing.T) {
	s := mustNew(t, testTree)
	tests := []struct {
		name    string
		domain  string
		entries []descriptor.Entry
		count   int64  // the limit's count; -1 for no limit
		key     string // the counter key
		metric  string
	}{
		{"nested default entry", "test", e("key1", "value1", "subkey1", "x"), 5, "x", "test.key1_value1.subkey1"},
		{"nested exact entry wins over default", "test", e("key1", "value1", "subkey1", "subvalue1"), 10, "", "test.key1_value1.subkey1_subvalue1"},
		{"placeholder without a limit", "test", e("key1", "value1"), -1, "", ""},
		{"unknown top-level value", "test", e("key1", "other", "subkey1", "x"), -1, "", ""},
		{"default entry", "test", e("key2", "anything"), 20, "anything", "test.key2"},
		{"default entry, empty value", "test", e("key2", ""), 20, "", "test.key2"},
		{"exact entry over default", "test", e("key2", "value2"), 30, "", "test.key2_value2"},
		{"allow-listed value", "test", e("key2", "value3"), -1, "", ""},
		{"descriptor deeper than the tree", "test", e("key2", "value2", "x", "y"), -1, "", ""},
		{"descriptor deeper than a leaf default", "test", e("key3", "a", "b", "c"), -1, "", ""},
		{"limit on an inner node", "test", e("key5", "value5"), 15, "", "test.key5_value5"},
		{"limit on its child", "test", e("key5", "value5", "subkey5", "subvalue5"), 25, "", "test.key5_value5.subkey5_subvalue5"},
		{"child not matched", "test", e("key5", "value5", "subkey5", "other"), -1, "", ""},
		{"unknown key", "test", e("nope", "x"), -1, "", ""},
		{"unknown domain", "other", e("key2", "x"), -1, "", ""},
		{"no entries", "test", nil, -1, "", ""},
		{"wildcard, per value", "test", e("path", "/api/orders"), 40, "/api/orders", "test.path_/api/*"},
		{"exact over wildcard", "test", e("path", "/api/users"), 42, "", "test.path_/api/users"},
		{"first wildcard in configuration order", "test", e("path", "/api/admin/x"), 40, "/api/admin/x", "test.path_/api/*"},
		{"wildcard matches the bare prefix", "test", e("path", "/api/"), 40, "/api/", "test.path_/api/*"},
		{"shared wildcard", "test", e("path", "/static/a.css"), 43, "", "test.path_/static/*"},
		{"leading wildcard", "test", e("path", "/img/a.png"), 44, "/img/a.png", "test.path_*.png"},
		{"wildcard in the middle", "test", e("path", "/v2/items/7"), 45, "/v2/items/7", "test.path_/v*/items/*"},
		{"wildcards not matching fall to default", "test", e("path", "/v2/other"), 46, "/v2/other", "test.path"},
		{"two counted levels", "test", e("tenant", "acme", "user", "bob"), 47, "4:acmebob", "test.tenant.user"},
		{"one counted level above an exact one", "test", e("tenant", "acme", "plan", "gold"), 48, "acme", "test.tenant.plan_gold"},
		{"shared wildcard under a default", "test", e("tenant", "acme", "file", "foo"), 49, "acme", "test.tenant.file_f*"},
		{"tenant alone has no limit", "test", e("tenant", "acme"), -1, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := s.Match(tt.domain, tt.entries)
			if tt.count < 0 {
				if m.Rule != nil {
					t.Fatalf("got rule %s, want none", m.Rule.MetricKey)
				}
				return
			}
			if m.Rule == nil {
				t.Fatalf("got no rule, want a limit of %d", tt.count)
			}
			if got := m.Rule.Displays[0].Count; got != tt.count {
				t.Errorf("limit: got %d, want %d", got, tt.count)
			}
			if m.Key != tt.key {
				t.Errorf("key: got %q, want %q", m.Key, tt.key)
			}
			if got := m.MetricName(); got != tt.metric {
				t.Errorf("metric: got %q, want %q", got, tt.metric)
			}
			if m.Rule.Policy == nil || m.Rule.Policy.Len() != 1 || m.Rule.Policy.Limits()[0].Algorithm != sluice.FixedWindow {
				t.Errorf("policy: got %v, want one fixed window", m.Rule.Policy)
			}
		})
	}
}

func TestUnlimitedAndDenyAll(t *testing.T) {
	s := mustNew(t, testTree)
	m := s.Match("test", e("key6", "x"))
	if m.Rule == nil || !m.Rule.Unlimited || m.Rule.Policy != nil {
		t.Fatalf("key6: got %+v, want an unlimited rule without policy", m.Rule)
	}
	m = s.Match("test", e("banned", "x"))
	if m.Rule == nil || !m.Rule.DenyAll || m.Rule.Policy != nil {
		t.Fatalf("banned: got %+v, want a deny-all rule without policy", m.Rule)
	}
	if d := m.Rule.Displays[0]; d.RequestsPerUnit != 0 || d.Unit != descriptor.Minute {
		t.Errorf("banned display: got %+v, want 0 per minute", d)
	}
}

func TestUnits(t *testing.T) {
	want := map[string]time.Duration{
		"second": time.Second, "MINUTE": time.Minute, "Hour": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
	}
	for name, d := range want {
		u, err := descriptor.ParseUnit(name)
		if err != nil {
			t.Fatalf("ParseUnit(%q): %v", name, err)
		}
		if u.Duration() != d || !strings.EqualFold(u.String(), name) {
			t.Errorf("%s: got %v %s, want %v", name, u.Duration(), u, d)
		}
	}
	// The values of Envoy's rls.proto enum.
	if descriptor.Month != 5 || descriptor.Year != 6 || descriptor.Week != 7 {
		t.Errorf("enum values differ from rls.proto")
	}
	for _, bad := range []string{"", "foo", "seconds", "unknown"} {
		if _, err := descriptor.ParseUnit(bad); err == nil {
			t.Errorf("ParseUnit(%q): got no error", bad)
		}
	}
	if descriptor.Unit(9).Duration() != 0 || descriptor.UnitUnknown.Valid() {
		t.Errorf("invalid units must have no length")
	}
}

func TestPolicyNames(t *testing.T) {
	s1, s2 := mustNew(t, testTree), mustNew(t, testTree)
	seen := map[string]string{}
	for _, es := range [][]descriptor.Entry{
		e("key1", "value1", "subkey1", "x"), e("key1", "value1", "subkey1", "subvalue1"),
		e("key2", "x"), e("key2", "value2"), e("path", "/api/x"), e("path", "/static/x"),
		e("tenant", "a", "user", "b"),
	} {
		a, b := s1.Match("test", es), s2.Match("test", es)
		n := a.Rule.Policy.Name()
		if n != b.Rule.Policy.Name() {
			t.Errorf("%v: policy differs between two builds: %q and %q", es, n, b.Rule.Policy.Name())
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%v and %s share policy name %q", es, prev, n)
		}
		seen[n] = a.Rule.MetricKey
	}
	if got := s1.Match("test", e("key1", "value1", "subkey1", "x")).Rule.Policy.Name(); got != "test/key1_value1/subkey1" {
		t.Errorf("got %q, want test/key1_value1/subkey1", got)
	}
	if got := s1.Match("test", e("path", "/api/x")).Rule.Policy.Name(); got != "test/path_%2Fapi%2F*" {
		t.Errorf("got %q, want the slashes escaped", got)
	}
	// Distinct paths that would read alike unescaped keep distinct names.
	if a, b := descriptor.PolicyName("d", []string{"a/b"}), descriptor.PolicyName("d", []string{"a", "b"}); a == b {
		t.Errorf("PolicyName: %q for both", a)
	}
	long := strings.Repeat("v", 300)
	n1, n2 := descriptor.PolicyName("d", []string{"k_" + long}), descriptor.PolicyName("d", []string{"k_" + long + "x"})
	if len(n1) > 200 || n1 == n2 {
		t.Errorf("long names: got %q and %q, want distinct names of at most 200 bytes", n1, n2)
	}
	if _, err := sluice.NewPolicy(descriptor.PolicyName("d\x01", []string{"k\n"}), sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}); err != nil {
		t.Errorf("escaped control characters: %v", err)
	}
}

func TestCounterKeysAreInjective(t *testing.T) {
	s := mustNew(t, testTree)
	a := s.Match("test", e("tenant", "ab", "user", "c"))
	b := s.Match("test", e("tenant", "a", "user", "bc"))
	if a.Key == b.Key {
		t.Fatalf("both get key %q", a.Key)
	}
}

// TestCountersThroughStore decides real requests: each value of a default
// entry and of a wildcard has its own counter, a shared wildcard has one.
func TestCountersThroughStore(t *testing.T) {
	s := mustNew(t, descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "ip", RateLimit: rl(1, descriptor.Minute)},
		{Key: "path", Value: "/a/*", RateLimit: rl(1, descriptor.Minute)},
		{Key: "path", Value: "/b/*", ShareThreshold: true, RateLimit: rl(1, descriptor.Minute)},
	}})
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()
	take := func(es ...string) bool {
		t.Helper()
		m := s.Match("d", e(es...))
		d, err := store.Take(context.Background(), m.Rule.Policy, m.Key, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for _, step := range []struct {
		es   []string
		want bool
	}{
		{[]string{"ip", "1.1.1.1"}, true}, {[]string{"ip", "1.1.1.1"}, false}, {[]string{"ip", "2.2.2.2"}, true},
		{[]string{"path", "/a/x"}, true}, {[]string{"path", "/a/y"}, true}, {[]string{"path", "/a/x"}, false},
		{[]string{"path", "/b/x"}, true}, {[]string{"path", "/b/y"}, false},
	} {
		if got := take(step.es...); got != step.want {
			t.Errorf("%v: allowed %v, want %v", step.es, got, step.want)
		}
	}
	clk.Advance(time.Minute) // a fixed window aligned to the minute: the next one is fresh
	if !take("ip", "1.1.1.1") {
		t.Errorf("after a minute: denied, want allowed")
	}
}

func TestReplaces(t *testing.T) {
	// envoyproxy/ratelimit's documented example of replaces.
	s := mustNew(t, descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "key_1", Value: "value_1", Descriptors: []descriptor.Descriptor{
			{Key: "user", Value: "bkthomps", RateLimit: named("specific_limit", 5, descriptor.Second)},
		}},
		{Key: "key_2", Value: "value_2", Descriptors: []descriptor.Descriptor{
			{Key: "user", Value: "bkthomps", RateLimit: named("", 10, descriptor.Second, "specific_limit")},
		}},
		{Key: "free", RateLimit: &descriptor.RateLimit{Unlimited: true, Replaces: []string{"other"}}},
		{Key: "x", RateLimit: named("other", 1, descriptor.Second)},
	}})
	one := e("key_1", "value_1", "user", "bkthomps")
	two := e("key_2", "value_2", "user", "bkthomps")

	ms := []descriptor.Match{s.Match("d", one)}
	descriptor.ApplyReplaces(ms)
	if ms[0].Rule == nil || ms[0].Rule.Displays[0].Count != 5 {
		t.Fatalf("alone: got %+v, want the 5/s limit", ms[0].Rule)
	}
	ms = []descriptor.Match{s.Match("d", one), s.Match("d", two)}
	descriptor.ApplyReplaces(ms)
	if ms[0].Rule != nil || !ms[0].Replaced {
		t.Errorf("both: the named limit is still there: %+v", ms[0])
	}
	if ms[1].Rule == nil || ms[1].Rule.Displays[0].Count != 10 || ms[1].Replaced {
		t.Errorf("both: got %+v, want the 10/s limit", ms[1])
	}
	// An unlimited rule's replaces count too.
	ms = []descriptor.Match{s.Match("d", e("x", "1")), s.Match("d", e("free", "1"))}
	descriptor.ApplyReplaces(ms)
	if ms[0].Rule != nil || ms[1].Rule == nil || !ms[1].Rule.Unlimited {
		t.Errorf("unlimited replacing: got %+v", ms)
	}
	descriptor.ApplyReplaces(nil) // no panic
}

func TestOverride(t *testing.T) {
	s := mustNew(t, testTree)
	m, err := s.Override("test", e("anything", "a", "b", ""), 7, descriptor.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if m.Rule == nil || m.Rule.ShadowMode || m.Rule.Policy == nil {
		t.Fatalf("got %+v, want a rule with a policy", m.Rule)
	}
	l := m.Rule.Policy.Limits()[0]
	if l.Count != 7 || l.Period != time.Hour || l.Algorithm != sluice.FixedWindow {
		t.Errorf("got %v, want 7 per hour in a fixed window", l)
	}
	if got := m.MetricName(); got != "test.anything_a.b" {
		t.Errorf("metric: got %q, want test.anything_a.b", got)
	}
	if got := m.Rule.Policy.Name(); got != "test//override" {
		t.Errorf("policy name: got %q", got)
	}
	m2, _ := s.Override("test", e("anything", "a", "b", ""), 7, descriptor.Hour)
	if m2.Rule != m.Rule || m2.Key != m.Key {
		t.Errorf("the same override twice: different rules or keys")
	}
	m3, _ := s.Override("test", e("anything", "ab", "", ""), 7, descriptor.Hour)
	if m3.Key == m.Key {
		t.Errorf("different entries share key %q", m.Key)
	}
	if m, _ := s.Override("nope", e("a", "b"), 7, descriptor.Hour); m.Rule != nil {
		t.Errorf("unknown domain: got a rule")
	}
	if _, err := s.Override("test", e("a", "b"), 7, descriptor.UnitUnknown); err == nil {
		t.Errorf("unknown unit: no error")
	}
	if m, _ := s.Override("test", e("a", "b"), 0, descriptor.Second); m.Rule == nil || !m.Rule.DenyAll {
		t.Errorf("zero requests: got %+v, want a deny-all rule", m.Rule)
	}
}

func TestMetricNames(t *testing.T) {
	s := mustNew(t, descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "k", DetailedMetric: true, RateLimit: rl(1, descriptor.Minute)},
		{Key: "w", Value: "foo*", DetailedMetric: true, ShareThreshold: true, RateLimit: rl(1, descriptor.Minute)},
		{Key: "a", Descriptors: []descriptor.Descriptor{
			{Key: "b", DetailedMetric: true, RateLimit: rl(1, descriptor.Minute)},
			{Key: "c", ValueToMetric: true, RateLimit: rl(1, descriptor.Minute)},
			{Key: "e", Value: "x", DetailedMetric: true, RateLimit: rl(1, descriptor.Minute)},
		}},
	}})
	for _, tt := range []struct {
		es   []descriptor.Entry
		want string
	}{
		{e("k", "v"), "d.k_v"},
		{e("w", "foobar"), "d.w_foobar"},
		{e("a", "1", "b", "2"), "d.a.b_2"},
		{e("a", "1", "c", "2"), "d.a_1.c_2"},
		{e("a", "1", "e", "x"), "d.a.e_x"},
	} {
		if got := s.Match("d", tt.es).MetricName(); got != tt.want {
			t.Errorf("%v: got %q, want %q", tt.es, got, tt.want)
		}
	}
	if (descriptor.Match{}).MetricName() != "" {
		t.Errorf("no rule: want an empty name")
	}
}

func TestSluiceLimits(t *testing.T) {
	limits := []sluice.Limit{
		{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second, Burst: 20},
		{Algorithm: sluice.SlidingWindow, Count: 100, Period: 30 * time.Second},
	}
	s := mustNew(t, descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "k", RateLimit: &descriptor.RateLimit{Limits: limits, Name: "n"}},
	}})
	r := s.Match("d", e("k", "v")).Rule
	if r == nil || r.Policy.Len() != 2 || r.Policy.Limits()[0] != limits[0] || r.Policy.Limits()[1] != limits[1] {
		t.Fatalf("got %+v, want both limits", r)
	}
	want := []descriptor.Display{
		{Count: 10, Period: time.Second, RequestsPerUnit: 10, Unit: descriptor.Second, UnitMultiplier: 1},
		{Count: 100, Period: 30 * time.Second, RequestsPerUnit: 100, Unit: descriptor.Second, UnitMultiplier: 30},
	}
	for i, d := range r.Displays {
		if d != want[i] {
			t.Errorf("display %d: got %+v, want %+v", i, d, want[i])
		}
	}
}

// TestDisplay: a limit is shown in the protocol's form exactly whenever
// the protocol can say it: Count per the longest unit that divides the
// period, times unit_multiplier; a period of a fraction of a second as a
// reduced fraction of seconds; only what no 32-bit form holds is scaled.
func TestDisplay(t *testing.T) {
	const day = 24 * time.Hour
	for _, tt := range []struct {
		l    sluice.Limit
		want descriptor.Display
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: 15 * time.Minute}, descriptor.Display{Count: 5, Period: 15 * time.Minute, RequestsPerUnit: 5, Unit: descriptor.Minute, UnitMultiplier: 15}},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 90 * time.Minute}, descriptor.Display{Count: 1, Period: 90 * time.Minute, RequestsPerUnit: 1, Unit: descriptor.Minute, UnitMultiplier: 90}},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 7, Period: 2 * time.Hour}, descriptor.Display{Count: 7, Period: 2 * time.Hour, RequestsPerUnit: 7, Unit: descriptor.Hour, UnitMultiplier: 2}},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: 500 * time.Millisecond}, descriptor.Display{Count: 5, Period: 500 * time.Millisecond, RequestsPerUnit: 10, Unit: descriptor.Second, UnitMultiplier: 1}},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 1500 * time.Millisecond}, descriptor.Display{Count: 1, Period: 1500 * time.Millisecond, RequestsPerUnit: 2, Unit: descriptor.Second, UnitMultiplier: 3}},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: 7 * time.Millisecond}, descriptor.Display{Count: 3, Period: 7 * time.Millisecond, RequestsPerUnit: 3000, Unit: descriptor.Second, UnitMultiplier: 7}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: 14 * day}, descriptor.Display{Count: 1000, Period: 14 * day, RequestsPerUnit: 1000, Unit: descriptor.Week, UnitMultiplier: 2}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 30, Period: 30 * day}, descriptor.Display{Count: 30, Period: 30 * day, RequestsPerUnit: 30, Unit: descriptor.Month, UnitMultiplier: 1}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 9, Period: 365 * day}, descriptor.Display{Count: 9, Period: 365 * day, RequestsPerUnit: 9, Unit: descriptor.Year, UnitMultiplier: 1}},
		// More than 32 bits of requests: the reduced fraction per second.
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10_000_000_000, Period: day}, descriptor.Display{Count: 10_000_000_000, Period: day, RequestsPerUnit: 3_125_000, Unit: descriptor.Second, UnitMultiplier: 27}},
		// No exact form fits: scaled to a second, rounded down.
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: 1_000_000_007 * time.Nanosecond}, descriptor.Display{Count: 5, Period: 1_000_000_007 * time.Nanosecond, RequestsPerUnit: 4, Unit: descriptor.Second, UnitMultiplier: 1}},
	} {
		s := mustNew(t, descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
			{Key: "k", RateLimit: &descriptor.RateLimit{Limits: []sluice.Limit{tt.l}}},
		}})
		if got := s.Match("d", e("k", "v")).Rule.Displays[0]; got != tt.want {
			t.Errorf("%v: got %+v, want %+v", tt.l, got, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	d := func(ds ...descriptor.Descriptor) descriptor.Domain {
		return descriptor.Domain{Name: "d", Descriptors: ds}
	}
	for _, tt := range []struct {
		name    string
		domains []descriptor.Domain
		want    string
	}{
		{"empty domain", []descriptor.Domain{{}}, "no name"},
		{"duplicate domain", []descriptor.Domain{d(), d()}, `duplicate domain "d"`},
		{"empty key", []descriptor.Domain{d(descriptor.Descriptor{Value: "v"})}, "empty key"},
		{"duplicate key", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", Value: "v"}, descriptor.Descriptor{Key: "k", Value: "v"})}, "duplicate descriptor composite key"},
		{"duplicate composite key", []descriptor.Domain{d(descriptor.Descriptor{Key: "a_b"}, descriptor.Descriptor{Key: "a", Value: "b"})}, `composite key "a_b"`},
		{"nested duplicate", []descriptor.Domain{d(descriptor.Descriptor{Key: "a", Descriptors: []descriptor.Descriptor{{Key: "b"}, {Key: "b"}}})}, "d.a.b: duplicate"},
		{"invalid unit", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: rl(1, 0)})}, "invalid rate limit unit"},
		{"unit when unlimited", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: &descriptor.RateLimit{Unlimited: true, Unit: descriptor.Day}})}, "unit when unlimited"},
		{"limits when unlimited", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: &descriptor.RateLimit{Unlimited: true, Limits: []sluice.Limit{{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}}}})}, "limits when unlimited"},
		{"empty replaces", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: named("n", 1, descriptor.Second, "")})}, "empty replaces"},
		{"replaces self", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: named("n", 1, descriptor.Second, "n")})}, "same descriptor"},
		{"share threshold without wildcard", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", Value: "v", ShareThreshold: true})}, "share_threshold"},
		{"invalid sluice limit", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: &descriptor.RateLimit{Limits: []sluice.Limit{{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Second, Burst: 5}}}})}, "invalid limit"},
		{"too fast", []descriptor.Domain{d(descriptor.Descriptor{Key: "k", RateLimit: rl(4_000_000_000, descriptor.Second)})}, "invalid limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := descriptor.New(tt.domains...)
			if err == nil || !errors.Is(err, descriptor.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an ErrInvalid containing %q", err, tt.want)
			}
		})
	}
	// A tree that contains itself ends at MaxDepth.
	self := make([]descriptor.Descriptor, 1)
	self[0] = descriptor.Descriptor{Key: "k", Descriptors: self}
	if _, err := descriptor.New(d(self...)); err == nil || !strings.Contains(err.Error(), "levels deep") {
		t.Errorf("self-nesting tree: got %v", err)
	}
	// Every problem at once.
	_, err := descriptor.New(d(descriptor.Descriptor{Value: "v"}, descriptor.Descriptor{Key: "k", RateLimit: rl(1, 0)}))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("got %v, want two problems", err)
	}
}

func TestZeroSet(t *testing.T) {
	var s descriptor.Set
	if m := s.Match("d", e("k", "v")); m.Rule != nil {
		t.Errorf("zero Set matched")
	}
	if m, err := s.Override("d", e("k", "v"), 1, descriptor.Second); m.Rule != nil || err != nil {
		t.Errorf("zero Set override: %+v, %v", m, err)
	}
}

// TestOverrideConcurrent builds the same request limits from many
// goroutines: every caller must get one and the same rule (run with -race).
func TestOverrideConcurrent(t *testing.T) {
	s := mustNew(t, testTree)
	const n = 8
	rules := make(chan *descriptor.Rule, n*50)
	done := make(chan struct{})
	for g := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 50 {
				m, err := s.Override("test", e("k", "v"), uint32(i%5+1), descriptor.Unit(g%3+1))
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 && g%3 == 0 {
					rules <- m.Rule
				}
			}
		}()
	}
	for range n {
		<-done
	}
	close(rules)
	var first *descriptor.Rule
	for r := range rules {
		if first == nil {
			first = r
		}
		if r != first {
			t.Fatalf("two rules for one request limit")
		}
	}
}

func TestAllowListed(t *testing.T) {
	s, err := descriptor.New(descriptor.Domain{Name: "d", Descriptors: []descriptor.Descriptor{
		{Key: "free"},
		{Key: "user", Descriptors: []descriptor.Descriptor{{Key: "plan", Value: "x", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1, Unit: descriptor.Second}}}},
		{Key: "limited", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1, Unit: descriptor.Second}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain  string
		entries []descriptor.Entry
		want    bool
	}{
		{"d", []descriptor.Entry{{"free", "a"}}, true},
		{"d", []descriptor.Entry{{"user", "u"}}, true}, // a node that only holds nested descriptors
		{"d", []descriptor.Entry{{"user", "u"}, {"plan", "x"}}, false},
		{"d", []descriptor.Entry{{"limited", "a"}}, false},
		{"d", []descriptor.Entry{{"nope", "a"}}, false},
		{"d", []descriptor.Entry{{"free", "a"}, {"deeper", "b"}}, false},
		{"other", []descriptor.Entry{{"free", "a"}}, false},
	} {
		if got := s.AllowListed(tc.domain, tc.entries); got != tc.want {
			t.Errorf("AllowListed(%q, %v) = %v, want %v", tc.domain, tc.entries, got, tc.want)
		}
	}
}

// TestOverrideDefinitionsBounded sends descriptors' own limits with ever
// new counts, as a caller who chooses its limits can: the process-wide
// registry of limit definitions (measured by the number the next new
// definition gets) must stop growing at MaxOverrideDefinitions, the
// limits beyond it are refused with ErrTooManyOverrides, and the limits
// admitted before keep working, on this Set and on a rebuilt one.
func TestOverrideDefinitionsBounded(t *testing.T) {
	probe := func(count int64) uint32 {
		t.Helper()
		p, err := sluice.NewPolicy("override-bound-probe", sluice.Limit{Algorithm: sluice.SlidingWindow, Count: count, Period: 17 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return storekit.Of(p).Def(0)
	}
	s := mustNew(t, testTree)
	if _, err := s.Override("test", e("k", "v"), 7, descriptor.Hour); err != nil {
		t.Fatal(err)
	}
	before := probe(999_001)
	refused := 0
	const base = 3_000_000_000
	for i := range 2 * descriptor.MaxOverrideDefinitions {
		_, err := s.Override("test", e("k", "v"), base+uint32(i), descriptor.Minute)
		switch {
		case errors.Is(err, descriptor.ErrTooManyOverrides):
			refused++
		case err != nil:
			t.Fatal(err)
		}
	}
	grown := probe(999_002) - before - 1
	if grown > descriptor.MaxOverrideDefinitions {
		t.Fatalf("the definitions registry grew by %d for descriptors' own limits, want at most %d", grown, descriptor.MaxOverrideDefinitions)
	}
	if refused < descriptor.MaxOverrideDefinitions {
		t.Fatalf("%d limits refused, want at least %d", refused, descriptor.MaxOverrideDefinitions)
	}
	// An admitted limit still works, uncached on a fresh Set too.
	s2 := mustNew(t, testTree)
	for _, set := range []*descriptor.Set{s, s2} {
		m, err := set.Override("test", e("k", "v"), 7, descriptor.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if m.Rule == nil || m.Rule.Policy == nil {
			t.Fatal("an admitted limit got no rule")
		}
	}
	if m, err := s2.Override("test", e("k", "v"), 0, descriptor.Hour); err != nil || !m.Rule.DenyAll {
		t.Fatalf("zero requests per unit beyond the bound: got %+v, %v; want a deny-all rule", m.Rule, err)
	}
}
