package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
)

func entries(kv ...string) []descriptor.Entry {
	var out []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// TestDescriptorsFull loads a file that uses every field and checks that
// each reached the rule tree.
func TestDescriptorsFull(t *testing.T) {
	set, err := LoadDescriptors("testdata/descriptors/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rule := func(kv ...string) *descriptor.Rule {
		t.Helper()
		m := set.Match("full", entries(kv...))
		if m.Rule == nil {
			t.Fatalf("%v: no rule", kv)
		}
		return m.Rule
	}
	fixed := func(count int64, period time.Duration) []sluice.Limit {
		return []sluice.Limit{{Algorithm: sluice.FixedWindow, Count: count, Period: period}}
	}
	for _, tt := range []struct {
		entries []string
		limits  []sluice.Limit
	}{
		{[]string{"remote_address", "192.0.2.1"}, fixed(10, time.Second)},
		{[]string{"remote_address", "10.0.0.1"}, fixed(600, time.Minute)},
		{[]string{"path", "/api/x"}, fixed(100, time.Hour)},
		{[]string{"path", "/static/x"}, fixed(7000, 7*24*time.Hour)},
		{[]string{"service", "billing"}, fixed(1_000_000, 365*24*time.Hour)},
		{[]string{"service", "billing", "user", "u"}, fixed(300, 30*24*time.Hour)},
		{[]string{"api_key", "k"}, []sluice.Limit{{Algorithm: sluice.TokenBucket, Count: 100, Period: 30 * time.Second, Burst: 150}}},
		{[]string{"login", "u"}, []sluice.Limit{{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute}}},
		{[]string{"tenant", "t"}, []sluice.Limit{
			{Algorithm: sluice.GCRA, Count: 10, Period: time.Second, Burst: 20},
			{Algorithm: sluice.SlidingWindow, Count: 1000, Period: time.Hour},
		}},
	} {
		r := rule(tt.entries...)
		if r.Policy == nil || !slices.Equal(r.Policy.Limits(), tt.limits) {
			t.Errorf("%v: got %v, want %v", tt.entries, r.Policy, tt.limits)
		}
	}
	if r := rule("remote_address", "192.0.2.1"); r.Name != "per_ip" || r.ShadowMode {
		t.Errorf("per_ip: got name %q shadow %v", r.Name, r.ShadowMode)
	}
	if r := rule("remote_address", "10.0.0.1"); !r.ShadowMode {
		t.Errorf("10.0.0.1: shadow_mode lost")
	}
	if m := set.Match("full", entries("remote_address", "10.0.0.2")); m.Rule != nil {
		t.Errorf("10.0.0.2: got a rule, want the allow-listed value")
	}
	if r := rule("remote_address", "10.0.0.3"); !r.DenyAll {
		t.Errorf("10.0.0.3: want a rule denying everything")
	}
	if r := rule("internal", "x"); !r.Unlimited {
		t.Errorf("internal: want unlimited")
	}
	if m := set.Match("full", entries("path", "/api/x")); !m.Rule.DetailedMetric || m.MetricName() != "full.path_/api/x" || m.Key != "/api/x" {
		t.Errorf("/api/x: got metric %q key %q", m.MetricName(), m.Key)
	}
	if m := set.Match("full", entries("path", "/static/x")); !m.Rule.ValueToMetric || m.Key != "" {
		t.Errorf("/static/x: got key %q, want one shared counter", m.Key)
	}
	if r := rule("service", "billing"); !r.QuotaMode || !slices.Equal(r.Replaces, []string{"per_ip"}) {
		t.Errorf("billing: got quota_mode %v replaces %v", r.QuotaMode, r.Replaces)
	}
	if pen, ok := rule("password_reset", "u").Policy.Penalty(); !ok || pen.After != 2 || pen.Forget != 24*time.Hour ||
		!slices.Equal(pen.Blocks, []time.Duration{time.Minute, 10 * time.Minute, time.Hour}) {
		t.Errorf("password_reset: got penalty %+v, %v", pen, ok)
	}
	if r := rule("tenant", "t"); r.Name != "tenant_limits" {
		t.Errorf("tenant: got name %q", r.Name)
	}
}

// TestDescriptorsInvalid loads each file of testdata/descriptors/invalid,
// whose "# want: LINE:COL: text" comments list the problems it must report
// (LINE 0 for a problem without a position).
func TestDescriptorsInvalid(t *testing.T) {
	files, err := filepath.Glob("testdata/descriptors/invalid/*.yaml")
	if err != nil || len(files) < 30 {
		t.Fatalf("fixtures: %v, %d files", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			for line := range strings.SplitSeq(string(data), "\n") {
				w, ok := strings.CutPrefix(line, "# want: ")
				if !ok {
					continue
				}
				if rest, ok := strings.CutPrefix(w, "0:0: "); ok {
					wants = append(wants, f+": "+rest)
				} else {
					wants = append(wants, f+":"+w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("the fixture has no # want: line")
			}
			_, err = LoadDescriptors(f)
			var ce *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ce) {
				t.Fatalf("got %v, want an *Error wrapping ErrInvalid", err)
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got\n%v\nwant a problem %q", err, w)
				}
			}
			if len(ce.Problems) != len(wants) {
				t.Errorf("got %d problems, want %d:\n%v", len(ce.Problems), len(wants), err)
			}
		})
	}
}

func TestDescriptorsDirectory(t *testing.T) {
	files, err := DescriptorFiles("testdata/descriptors/tree")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"testdata/descriptors/tree/a.yaml", "testdata/descriptors/tree/ratelimit", "testdata/descriptors/tree/sub/b.yml"}
	if !slices.Equal(files, want) {
		t.Fatalf("got %v, want %v (every file but dot files)", files, want)
	}
	set, err := LoadDescriptors("testdata/descriptors/tree")
	if err != nil {
		t.Fatal(err)
	}
	if d := set.Domains(); !slices.Contains(d, "a") || !slices.Contains(d, "b") || !slices.Contains(d, "c") || len(d) != 3 {
		t.Errorf("got domains %v, want a, b and c", d)
	}
	if m := set.Match("a", entries("k", "v")); m.Rule == nil {
		t.Errorf("domain a: no rule for k")
	}

	// A symbolic link to a file is read, one to a directory is not.
	dir := t.TempDir()
	abs, _ := filepath.Abs("testdata/descriptors/tree")
	if err := os.Symlink(filepath.Join(abs, "a.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Skip("no symbolic links:", err)
	}
	if err := os.Symlink(filepath.Join(abs, "sub"), filepath.Join(dir, "sublink")); err != nil {
		t.Fatal(err)
	}
	files, err = DescriptorFiles(dir)
	if err != nil || !slices.Equal(files, []string{filepath.Join(dir, "link.yaml")}) {
		t.Errorf("got %v, %v; want only link.yaml", files, err)
	}

	if _, err := LoadDescriptors(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no configuration file") {
		t.Errorf("empty directory: got %v", err)
	}
	if _, err := LoadDescriptorsWith(DescriptorOptions{}); err == nil {
		t.Errorf("no path: got no error")
	}
	if _, err := LoadDescriptors("testdata/descriptors/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: got %v, want ErrNotExist", err)
	}
}

func TestDescriptorsDuplicateDomain(t *testing.T) {
	_, err := LoadDescriptors("testdata/descriptors/duptree")
	want := `testdata/descriptors/duptree/2.yaml:2:9: domain: duplicate domain "same": testdata/descriptors/duptree/1.yaml configures it too`
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	// Merged, the files' top-level entries must still differ.
	_, err = LoadDescriptorsWith(DescriptorOptions{MergeDomains: true}, "testdata/descriptors/duptree")
	want = `testdata/descriptors/duptree/2.yaml:4:10: descriptors[0]: duplicate descriptor composite key "a": testdata/descriptors/duptree/1.yaml has it too`
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("merged: got %v, want %q", err, want)
	}
	// Problems in several files are all reported.
	_, err = LoadDescriptorsWith(DescriptorOptions{}, "testdata/descriptors/invalid/bad_unit.yaml", "testdata/descriptors/invalid/missing_key.yaml")
	if err == nil || !strings.Contains(err.Error(), "bad_unit.yaml:6:13") || !strings.Contains(err.Error(), "missing_key.yaml:4:5") {
		t.Errorf("two bad files: got %v", err)
	}
}

func TestDescriptorsMerge(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := write("b.yaml", "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	if _, err := LoadDescriptorsWith(DescriptorOptions{}, a, b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("without merging: got %v, want a duplicate domain", err)
	}
	set, err := LoadDescriptorsWith(DescriptorOptions{MergeDomains: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if set.Match("d", entries("a", "x")).Rule == nil || set.Match("d", entries("b", "x")).Rule == nil {
		t.Errorf("merged domain lacks a file's entries")
	}
}

func TestParseDescriptors(t *testing.T) {
	d, err := ParseDescriptors([]byte("domain: x\ndescriptors:\n  - key: k\n    value: 5\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n    shadow_mode: yes\n"), "inline")
	if err != nil {
		t.Fatal(err)
	}
	got := d.Descriptors[0]
	if d.Name != "x" || got.Key != "k" || got.Value != "5" || got.RateLimit.RequestsPerUnit != 16 || !got.ShadowMode {
		t.Errorf("got %+v", d)
	}
	big := make([]byte, MaxSize+1)
	if _, err := ParseDescriptors(big, "big"); !errors.Is(err, ErrInvalid) {
		t.Errorf("oversized: got %v", err)
	}
}

// repoRoot returns the directory of go.mod above the working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// TestEnvoyRatelimitCorpus loads envoyproxy/ratelimit's own test and example
// configurations, kept outside the repository (under their own license) in
// ../shared/envoy-ratelimit-configs: every file of valid/ must load, every
// file of invalid/ must be refused.
func TestEnvoyRatelimitCorpus(t *testing.T) {
	corpus := filepath.Join(repoRoot(t), "..", "shared", "envoy-ratelimit-configs")
	if _, err := os.Stat(corpus); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the corpus of envoyproxy/ratelimit configurations is missing (%v); CI needs it", err)
		}
		t.Skipf("the corpus of envoyproxy/ratelimit configurations is not here (%v)", err)
	}
	valid, _ := filepath.Glob(filepath.Join(corpus, "valid", "*.yaml"))
	invalid, _ := filepath.Glob(filepath.Join(corpus, "invalid", "*.yaml"))
	if len(valid) == 0 || len(invalid) == 0 {
		t.Fatalf("the corpus has %d valid and %d invalid files", len(valid), len(invalid))
	}
	for _, f := range valid {
		if _, err := LoadDescriptors(f); err != nil {
			t.Errorf("valid/%s: %v", filepath.Base(f), err)
		}
	}
	// The reason each file is refused for, by its name.
	reasons := map[string]string{
		"bad_limit_unit.yaml":      "invalid rate limit unit",
		"bad_yaml.yaml":            "end of stream",
		"duplicate_key.yaml":       "duplicate descriptor composite key",
		"empty_domain.yaml":        "domain: missing",
		"empty_key.yaml":           "key: missing",
		"misspelled_key.yaml":      "ratelimit: unknown field",
		"misspelled_key2.yaml":     "requestsperunit: unknown field",
		"non_map_list.yaml":        "want a mapping",
		"non_string_key.yaml":      "a key must be a string",
		"replaces_empty.yaml":      "empty replaces entry",
		"replaces_self.yaml":       "name of the same descriptor",
		"unlimited_with_unit.yaml": "unit when unlimited",
	}
	basic := filepath.Join(corpus, "valid", "basic_config.yaml")
	for _, f := range invalid {
		name := filepath.Base(f)
		paths := []string{f}
		reason := reasons[name]
		if strings.HasPrefix(name, "duplicate_domain-with-") {
			if _, err := LoadDescriptors(f); err != nil {
				t.Errorf("invalid/%s alone: %v, want it to load", name, err)
			}
			paths, reason = []string{basic, f}, "duplicate domain"
		}
		_, err := LoadDescriptorsWith(DescriptorOptions{}, paths...)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid/%s: got %v, want it refused", name, err)
			continue
		}
		if !strings.Contains(err.Error(), reason) {
			t.Errorf("invalid/%s: got %v, want a problem with %q", name, err, reason)
		}
	}
	// The two files sharing a domain load together only when merging.
	k1, k2 := filepath.Join(corpus, "valid", "merge_domain_key1.yaml"), filepath.Join(corpus, "valid", "merge_domain_key2.yaml")
	if _, err := LoadDescriptorsWith(DescriptorOptions{}, k1, k2); !errors.Is(err, ErrInvalid) {
		t.Errorf("merge_domain files without merging: got %v, want a duplicate domain", err)
	}
	set, err := LoadDescriptorsWith(DescriptorOptions{MergeDomains: true}, k1, k2)
	if err != nil {
		t.Fatalf("merge_domain files merged: %v", err)
	}
	if set.Match("test-domain", entries("key1", "value1")).Rule == nil || set.Match("test-domain", entries("key2", "value2")).Rule == nil {
		t.Errorf("merged domain lacks an entry")
	}
	// Matching on envoyproxy/ratelimit's own basic configuration, as its
	// tests expect.
	set, err = LoadDescriptors(basic)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kv    []string
		count int64 // -1: no limit
	}{
		{[]string{"key1", "value1", "subkey1", "something"}, 5},
		{[]string{"key1", "value1", "subkey1", "subvalue1"}, 10},
		{[]string{"key2", "something"}, 20},
		{[]string{"key2", "value2"}, 30},
		{[]string{"key2", "value3"}, -1},
		{[]string{"key3", "foo"}, 1},
		{[]string{"key4", "foo"}, 1},
		{[]string{"key5", "value5", "subkey5", "subvalue5"}, 25},
		{[]string{"key1", "value1"}, -1},
		{[]string{"foo", "bar"}, -1},
	} {
		m := set.Match("test-domain", entries(tt.kv...))
		switch {
		case tt.count < 0 && m.Rule != nil:
			t.Errorf("basic_config %v: got a rule, want none", tt.kv)
		case tt.count >= 0 && (m.Rule == nil || m.Rule.Displays[0].Count != tt.count):
			t.Errorf("basic_config %v: got %+v, want a limit of %d", tt.kv, m.Rule, tt.count)
		}
	}
	if r := set.Match("test-domain", entries("key6", "x")).Rule; r == nil || !r.Unlimited {
		t.Errorf("basic_config key6: want unlimited")
	}
}

// FuzzParseDescriptors feeds arbitrary files to the loader: it must never
// panic, must refuse or accept the same input the same way every time, and
// what it accepts must build into a Set.
func FuzzParseDescriptors(f *testing.F) {
	for _, p := range []string{"testdata/descriptors/full.yaml", "testdata/descriptors/tree/a.yaml"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	invalid, _ := filepath.Glob("testdata/descriptors/invalid/*.yaml")
	for _, p := range invalid {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: {unit: week, requests_per_unit: 3}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a\n    descriptors:\n      - key: u\n        enforce: 25%\n        rate_limit: {unit: day, requests_per_unit: 3}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a\n    enforce: 5%\n    rate_limit: {unit: day, requests_per_unit: 3}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: month, requests_per_unit: 3, calendar: {anchor: 31T00:00, timezone: Europe/Berlin}}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      limits:\n        - {period: week, requests_per_unit: 3, algorithm: sliding_window, calendar: {week_start: monday}}\n        - {period: 1s, requests_per_unit: 1}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: year, requests_per_unit: 3, calendar: {anchor: 04-01}, sync: async}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d1, err1 := ParseDescriptors(data, "fuzz")
		_, err2 := ParseDescriptors(data, "fuzz")
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("two parses disagree: %v and %v", err1, err2)
		}
		if err1 != nil {
			if !errors.Is(err1, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err1)
			}
			return
		}
		if _, err := descriptor.New(d1); err != nil {
			t.Fatalf("accepted a file that does not build: %v", err)
		}
	})
}

// TestDescriptorsAliasBomb loads a file whose aliases repeat a subtree a
// hundred thousand times: the loader must stop early with a problem.
func TestDescriptorsAliasBomb(t *testing.T) {
	_, err := LoadDescriptors("testdata/descriptors/alias_bomb.yaml")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want an *Error", err)
	}
	if !strings.Contains(err.Error(), "stopped reading") || len(ce.Problems) > 1001 {
		t.Fatalf("got %d problems, want at most 1001 ending in stopped reading", len(ce.Problems))
	}
}

// TestDescriptorsSeveralDomains: files of distinct domains each keep their
// own descriptors (each file's went into the first domain before).
func TestDescriptorsSeveralDomains(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: only_b\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set, err := LoadDescriptors(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		domain, key string
		count       int64 // 0: no rule
	}{{"a", "k", 1}, {"b", "k", 2}, {"b", "only_b", 3}, {"a", "only_b", 0}} {
		m := set.Match(tt.domain, entries(tt.key, "v"))
		switch {
		case tt.count == 0 && m.Rule != nil:
			t.Errorf("%s/%s: got a rule, want none", tt.domain, tt.key)
		case tt.count != 0 && (m.Rule == nil || m.Rule.Policy.Limits()[0].Count != tt.count):
			t.Errorf("%s/%s: got %+v, want a limit of %d", tt.domain, tt.key, m.Rule, tt.count)
		}
	}
}

// A descriptor's rate_limit chooses its sync mode, which reaches its policy.
func TestDescriptorSync(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	data := "domain: s\ndescriptors:\n  - key: global\n    rate_limit: {unit: second, requests_per_unit: 1000, sync: lease}\n" +
		"  - key: approx\n    rate_limit: {period: 1s, requests_per_unit: 100, algorithm: gcra, sync: async, sync_interval: 20ms}\n" +
		"  - key: plain\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := LoadDescriptors(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want sluice.Sync
	}{
		{"global", sluice.Sync{Mode: sluice.SyncLease}},
		{"approx", sluice.Sync{Mode: sluice.SyncAsync, Interval: 20 * time.Millisecond}},
		{"plain", sluice.Sync{}},
	} {
		m := set.Match("s", entries(tc.key, "v"))
		if m.Rule == nil || m.Rule.Policy == nil {
			t.Fatalf("%s: no rule", tc.key)
		}
		if got := m.Rule.Policy.Sync(); got != tc.want {
			t.Errorf("%s: sync %+v, want %+v", tc.key, got, tc.want)
		}
	}
}

// TestDescriptorCalendar: period day, week, month or year makes a calendar
// quota, with its calendar mapping or the defaults (UTC, the 1st at
// midnight), also among limits; unit: month keeps envoyproxy/ratelimit's
// fixed 30 days.
func TestDescriptorCalendar(t *testing.T) {
	d, err := ParseDescriptors([]byte(`domain: c
descriptors:
  - key: monthly
    rate_limit:
      requests_per_unit: 10000
      period: month
      calendar: {anchor: "15T09:00", timezone: Europe/Berlin}
  - key: weekly
    rate_limit:
      limits:
        - {requests_per_unit: 10, unit: second}
        - {requests_per_unit: 500, period: week, algorithm: sliding_window, calendar: {week_start: monday}}
  - key: envoy_month
    rate_limit: {requests_per_unit: 10, unit: month}
  - key: sluice_month
    rate_limit: {requests_per_unit: 10, period: month}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := descriptor.New(d)
	if err != nil {
		t.Fatal(err)
	}
	limit := func(key string, i int) sluice.Limit {
		t.Helper()
		r := set.Match("c", entries(key, "v")).Rule
		if r == nil || r.Policy == nil {
			t.Fatalf("%s: no rule", key)
		}
		return r.Policy.Limits()[i]
	}
	for _, tc := range []struct {
		key  string
		i    int
		want string // the calendar, or empty for none
	}{
		{"monthly", 0, "month anchor=15T09:00 zone=Europe/Berlin"},
		{"weekly", 0, ""},
		{"weekly", 1, "week start=monday"},
		{"envoy_month", 0, ""},
		{"sluice_month", 0, "month"},
	} {
		l := limit(tc.key, tc.i)
		got := ""
		if l.Calendar != nil {
			got = l.Calendar.String()
		}
		if got != tc.want {
			t.Errorf("%s[%d]: calendar %q, want %q", tc.key, tc.i, got, tc.want)
		}
	}
	if l := limit("envoy_month", 0); l.Period != 30*24*time.Hour {
		t.Errorf("unit: month is %v, want envoyproxy/ratelimit's 30 days", l.Period)
	}
	if l := limit("weekly", 1); l.Algorithm != sluice.SlidingWindow {
		t.Errorf("weekly: %v, want sliding_window", l.Algorithm)
	}
}

// TestDescriptorsDirectoryLink: a ConfigMap volume whose items put the
// descriptor files in a subdirectory (path: ratelimit/api.yaml) shows that
// subdirectory as a symbolic link, ratelimit -> ..data/ratelimit, and
// ..data as a link the kubelet points at a new directory on every update.
// The directory named by the config is walked through its link, and the
// files are named through it, so that a reader after the swap gets the new
// content rather than a path into the deleted old directory.
func TestDescriptorsDirectoryLink(t *testing.T) {
	dir := t.TempDir()
	write := func(gen, limit string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, gen, "ratelimit"), 0o755); err != nil {
			t.Fatal(err)
		}
		text := "domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: hour, requests_per_unit: " + limit + " }\n"
		if err := os.WriteFile(filepath.Join(dir, gen, "ratelimit", "api.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("..2026_01_01", "5")
	if err := os.Symlink("..2026_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Skip("no symbolic links:", err)
	}
	link := filepath.Join(dir, "ratelimit")
	if err := os.Symlink(filepath.Join("..data", "ratelimit"), link); err != nil {
		t.Fatal(err)
	}
	files, err := DescriptorFiles(link)
	if want := []string{filepath.Join(link, "api.yaml")}; err != nil || !slices.Equal(files, want) {
		t.Fatalf("got %v, %v; want %v", files, err, want)
	}
	limit := func() int64 {
		t.Helper()
		set, err := LoadDescriptors(link)
		if err != nil {
			t.Fatal(err)
		}
		m := set.Match("api", entries("client", "acme"))
		if m.Rule == nil || len(m.Rule.Displays) != 1 {
			t.Fatalf("got rule %+v, want one with one limit", m.Rule)
		}
		return m.Rule.Displays[0].Count
	}
	if got := limit(); got != 5 {
		t.Fatalf("got limit %d, want 5", got)
	}

	// The kubelet's update: a new directory, a new ..data renamed over the
	// old one, the old directory removed.
	write("..2026_01_02", "7")
	if err := os.Symlink("..2026_01_02", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01")); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != 7 {
		t.Fatalf("after the swap: got limit %d, want 7", got)
	}
}
