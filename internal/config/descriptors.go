package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/descriptor"
)

// The rate-limit service's configuration: envoyproxy/ratelimit's YAML files,
// unchanged, one domain per file, plus Sluice's extensions of rate_limit.
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 5}
//	  - key: to_number
//	    rate_limit:
//	      requests_per_unit: 100
//	      period: 12h              # Sluice: any period instead of unit
//	      algorithm: sliding_window # Sluice: any algorithm (default fixed_window)
//	  - key: api_key
//	    rate_limit:
//	      limits:                  # Sluice: several limits charged together
//	        - {requests_per_unit: 10, unit: second, algorithm: gcra, burst: 20}
//	        - {requests_per_unit: 1000, unit: hour}

// DescriptorOptions tunes LoadDescriptorsWith.
type DescriptorOptions struct {
	// MergeDomains lets several files configure one domain, their top-level
	// descriptors joined (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG). By
	// default a domain configured by two files is an error.
	MergeDomains bool
	// Check, if set, is called with every limit of the files that is valid
	// on its own; its error is reported as a problem at the limit's period
	// (the Redis store, for one, runs only whole microseconds).
	Check func(sluice.Limit) error
}

// LoadDescriptors reads the rate-limit service's configuration from path, a
// file or a directory, with the default options; see LoadDescriptorsWith.
func LoadDescriptors(path string) (*descriptor.Set, error) {
	return LoadDescriptorsWith(DescriptorOptions{}, path)
}

// LoadDescriptorsWith reads and validates every file of paths (each a file,
// or a directory read as DescriptorFiles lists it) and builds their domains
// into one Set. It reports every problem of every file at once: each file's
// problems in an *Error (wrapping ErrInvalid), several files' joined with
// errors.Join. A directory without any configuration file is an error.
func LoadDescriptorsWith(o DescriptorOptions, paths ...string) (*descriptor.Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("config: no descriptor configuration file or directory given")
	}
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		list, err := DescriptorFiles(p)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("config: %s holds no configuration file", p)
		}
		files = append(files, list...)
	}
	var docs []*descriptorFile
	var errs []error
	for _, name := range files {
		data, err := readLimited(name)
		if err != nil {
			return nil, err
		}
		f, err := parseDescriptorFile(data, name, o.Check)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		docs = append(docs, f)
	}
	domains, merr := mergeDomains(docs, o)
	errs = append(errs, merr...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	set, err := descriptor.New(domains...)
	if err != nil {
		// The files were checked above; a problem only descriptor.New finds
		// is still reported, without a line.
		return nil, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return set, nil
}

// ParseDescriptors validates data, the contents of one configuration file
// called name, and returns its domain.
func ParseDescriptors(data []byte, name string) (descriptor.Domain, error) {
	f, err := parseDescriptorFile(data, name, nil)
	if err != nil {
		return descriptor.Domain{}, err
	}
	return f.domain, nil
}

// DescriptorFiles lists the configuration files under dir, sorted (dir
// itself if it is a file): every file in dir and its subdirectories,
// whatever its name ends in, as envoyproxy/ratelimit reads every file of
// its runtime directory's tree. Names starting with a dot are skipped,
// files and directories alike (as envoyproxy/ratelimit does with
// RUNTIME_IGNOREDOTFILES), so that editors' swap files and the "..data"
// directories of a Kubernetes ConfigMap volume are not read; symbolic
// links to files are followed, to directories not, unless dir itself is
// one (a ConfigMap volume shows a subdirectory of its items as a link into
// ..data): the files are then named through dir, so that they are read
// from the volume's current data after the kubelet swaps it.
func DescriptorFiles(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("config: %w", err)
	case fi.Mode().IsRegular():
		return []string{dir}, nil // a file given where a directory may be
	case !fi.IsDir():
		return nil, nil
	}
	var out []string
	// os.DirFS opens dir through any link; the entries below it are
	// reported as they are, links included.
	err = fs.WalkDir(os.DirFS(dir), ".", func(rel string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if rel != "." && strings.HasPrefix(de.Name(), ".") {
			if de.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if de.IsDir() {
			return nil
		}
		if de.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil
			}
		} else if !de.Type().IsRegular() {
			return nil
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", dir, err)
	}
	return out, nil
}

func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: reading %s: %w", name, err)
	}
	return data, nil
}

// descriptorFile is one parsed file: its domain, and the nodes that merging
// needs for its messages.
type descriptorFile struct {
	name       string
	domain     descriptor.Domain
	domainNode *yaml.Node
	topNodes   []*yaml.Node // the key node of each top-level descriptor
	d          *decoder
}

// mergeDomains joins the files' domains, reporting a domain configured by
// two files (unless merging) and, when merging, top-level entries that
// collide across files.
func mergeDomains(docs []*descriptorFile, o DescriptorOptions) ([]descriptor.Domain, []error) {
	var out []descriptor.Domain
	first := map[string]int{}              // domain → index in out
	owner := map[string]string{}           // domain → first file
	keys := map[string]map[string]string{} // domain → composite key → file
	failed := map[*descriptorFile]bool{}
	for _, f := range docs {
		name := f.domain.Name
		i, dup := first[name]
		if dup && !o.MergeDomains {
			f.d.add(f.domainNode, "domain", "duplicate domain %q: %s configures it too (several files may share a domain only with merging enabled)", name, owner[name])
			failed[f] = true
			continue
		}
		if !dup {
			i = len(out)
			first[name], owner[name], keys[name] = i, f.name, map[string]string{}
			out = append(out, descriptor.Domain{Name: name})
		}
		for j, ds := range f.domain.Descriptors {
			ck := composite(ds)
			if other, clash := keys[name][ck]; clash && other != f.name {
				f.d.add(f.topNodes[j], fmt.Sprintf("descriptors[%d]", j), "duplicate descriptor composite key %q: %s has it too in domain %q", ck, other, name)
				failed[f] = true
				continue
			}
			keys[name][ck] = f.name
		}
		out[i].Descriptors = append(out[i].Descriptors, f.domain.Descriptors...)
	}
	var errs []error
	for _, f := range docs {
		if failed[f] {
			errs = append(errs, f.d.err)
		}
	}
	return out, errs
}

// composite is envoyproxy/ratelimit's name of an entry within its level:
// key, or key_value.
func composite(d descriptor.Descriptor) string {
	if d.Value == "" {
		return d.Key
	}
	return d.Key + "_" + d.Value
}

func parseDescriptorFile(data []byte, name string, check func(sluice.Limit) error) (*descriptorFile, error) {
	d := &decoder{err: &Error{File: name}, storeCheck: check}
	f := &descriptorFile{name: name, d: d}
	top, ok := d.document(data, "domain", "missing: the file is empty, and a file needs a domain")
	if !ok {
		return nil, d.err
	}
	root := resolve(top)
	if root.Kind != yaml.MappingNode {
		d.add(root, "", "want a mapping with domain and descriptors")
		return nil, d.err
	}
	d.stringFields(root, "", []string{"domain", "descriptors"}, nil, func(key string, v *yaml.Node) {
		switch key {
		case "domain":
			f.domainNode = v
			if s, ok := d.scalar(v, "domain"); ok {
				f.domain.Name = s
			}
		case "descriptors":
			dd := &descDecoder{decoder: d}
			f.domain.Descriptors, f.topNodes = dd.descriptorList(v, "descriptors", 1)
			if len(d.err.Problems) == 0 {
				dd.checkEnforce(f.domain.Descriptors, "descriptors", false)
			}
		}
	})
	if f.domain.Name == "" && f.domainNode == nil {
		d.add(root, "domain", "missing: a file needs a domain")
	} else if f.domain.Name == "" {
		d.add(f.domainNode, "domain", "must not be empty")
	}
	if len(d.err.Problems) > 0 {
		return nil, d.err
	}
	return f, nil
}

// stringFields is fields for a mapping whose keys must be strings, as
// envoyproxy/ratelimit wants them: a key such as 0.25 or true is reported
// once, as such, and skipped. A key of elsewhere is reported with its
// message: a field known to the format but misplaced, which
// envoyproxy/ratelimit would silently ignore.
func (d *decoder) stringFields(n *yaml.Node, path string, known []string, elsewhere map[string]string, f func(key string, v *yaml.Node)) {
	n = resolve(n)
	if n.Kind == yaml.MappingNode {
		kept := *n
		kept.Content = nil
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				d.add(k, join(path, k.Value), "a key must be a string")
				continue
			}
			if msg, ok := elsewhere[k.Value]; ok {
				d.add(k, join(path, k.Value), "%s", msg)
				continue
			}
			kept.Content = append(kept.Content, n.Content[i], n.Content[i+1])
		}
		n = &kept
	}
	d.fields(n, path, known, f)
}

// Fields of the format written at the wrong level.
var (
	inDescriptor = map[string]string{}
	inRateLimit  = map[string]string{}
)

func init() {
	for _, f := range []string{"shadow_mode", "enforce", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "key", "value", "descriptors"} {
		inRateLimit[f] = "belongs to the descriptor, beside rate_limit, not inside it"
	}
	for _, f := range []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "period", "calendar", "burst", "limits", "penalty", "sync", "sync_interval"} {
		inDescriptor[f] = "belongs inside rate_limit"
	}
}

// scalar decodes a string field as envoyproxy/ratelimit does: any scalar
// but a float (which it refuses) is taken as its text; null is empty.
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	switch {
	case n.Kind != yaml.ScalarNode:
		d.add(n, path, "want a string")
		return "", false
	case n.Tag == "!!null":
		return "", true
	case n.Tag == "!!float":
		d.add(n, path, "want a string, got the number %s (quote it: %q)", n.Value, n.Value)
		return "", false
	}
	return n.Value, true
}

// boolean decodes a boolean as YAML 1.1 (and so envoyproxy/ratelimit)
// reads one: true/false, yes/no, on/off, y/n, in any usual case.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!bool" || n.Tag == "!!str" && n.Style == 0) {
		switch strings.ToLower(n.Value) {
		case "true", "yes", "on", "y":
			return true, true
		case "false", "no", "off", "n":
			return false, true
		}
	}
	d.add(n, path, "want true or false, got %q", n.Value)
	return false, false
}

// descDecoder walks a file's descriptors, counting them: YAML aliases can
// repeat a subtree any number of times, or nest it in itself.
type descDecoder struct {
	*decoder
	count   int
	stopped bool
	// enforce holds the node of each descriptor's enforce, by path.
	enforce map[string]*yaml.Node
}

// Bounds on one file's tree, far beyond any real configuration.
const (
	maxDescriptorDepth = descriptor.MaxDepth
	maxDescriptors     = 100_000
	maxProblems        = 1000
)

var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
	"value_to_metric", "share_threshold", "quota_mode", "metadata", "enforce"}

// descriptorList decodes a list of descriptors, reporting entries of one
// level with the same composite key; it returns each entry's node too.
func (d *descDecoder) descriptorList(n *yaml.Node, path string, depth int) ([]descriptor.Descriptor, []*yaml.Node) {
	n = resolve(n)
	if depth > maxDescriptorDepth {
		d.add(n, path, "descriptors nested more than %d levels deep (or an alias that refers to itself)", maxDescriptorDepth)
		return nil, nil
	}
	if n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "want a list of descriptors, each a mapping with key and optionally value, rate_limit and descriptors")
		return nil, nil
	}
	var out []descriptor.Descriptor
	var nodes []*yaml.Node
	seen := map[string]int{}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			d.add(item, p, "want a mapping with key and optionally value, rate_limit and descriptors, got %q", item.Value)
			continue
		}
		if d.count++; d.count > maxDescriptors || len(d.err.Problems) >= maxProblems {
			if !d.stopped {
				d.add(item, p, "stopped reading: more than %d descriptors or %d problems in one file (aliases repeat them)", maxDescriptors, maxProblems)
				d.stopped = true
			}
			return out, nodes
		}
		ds, keyNode, ok := d.descriptor(item, p, depth)
		if !ok {
			continue
		}
		ck := composite(ds)
		if j, dup := seen[ck]; dup {
			d.add(keyNode, p, "duplicate descriptor composite key %q: %s[%d] has the same key and value", ck, path, j)
			continue
		}
		seen[ck] = i
		out = append(out, ds)
		nodes = append(nodes, keyNode)
	}
	return out, nodes
}

func (d *descDecoder) descriptor(n *yaml.Node, path string, depth int) (descriptor.Descriptor, *yaml.Node, bool) {
	var ds descriptor.Descriptor
	var keyNode, shareNode *yaml.Node
	before := len(d.err.Problems)
	d.stringFields(n, path, descriptorFields, inDescriptor, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "key":
			keyNode = v
			ds.Key, _ = d.scalar(v, p)
		case "value":
			ds.Value, _ = d.scalar(v, p)
		case "rate_limit":
			ds.RateLimit = d.rateLimit(v, p)
		case "descriptors":
			ds.Descriptors, _ = d.descriptorList(v, p, depth+1)
		case "shadow_mode":
			ds.ShadowMode, _ = d.boolean(v, p)
		case "enforce":
			if ds.Enforce = d.rollout(v, p); ds.Enforce != nil {
				if d.enforce == nil {
					d.enforce = map[string]*yaml.Node{}
				}
				d.enforce[path] = v
			}
		case "detailed_metric":
			ds.DetailedMetric, _ = d.boolean(v, p)
		case "value_to_metric":
			ds.ValueToMetric, _ = d.boolean(v, p)
		case "share_threshold":
			shareNode = v
			ds.ShareThreshold, _ = d.boolean(v, p)
		case "quota_mode":
			ds.QuotaMode, _ = d.boolean(v, p)
		case "metadata":
			// Free-form data for envoyproxy/ratelimit's newest versions;
			// Sluice keeps none of it.
			if m := resolve(v); m.Kind != yaml.MappingNode && m.Tag != "!!null" {
				d.add(v, p, "want a mapping")
			}
		}
	})
	if keyNode == nil {
		d.add(n, path+".key", "missing: every descriptor needs a key")
	} else if ds.Key == "" {
		d.add(keyNode, path+".key", "must not be empty")
	}
	if at := d.enforce[path]; ds.Enforce != nil {
		switch {
		case ds.RateLimit == nil:
			d.add(at, path+".enforce", "needs a rate_limit: a descriptor without one is never limited")
		case ds.RateLimit.Unlimited:
			d.add(at, path+".enforce", "not for an unlimited rate_limit")
		case ds.ShadowMode:
			d.add(at, path+".enforce", "shadow_mode already leaves every counter in shadow mode; drop one of them")
		}
	}
	if ds.ShareThreshold && !strings.Contains(ds.Value, "*") {
		d.add(shareNode, path+".share_threshold", "only for a wildcard value (one with *), which value %q is not", ds.Value)
	}
	at := keyNode
	if at == nil {
		at = n
	}
	return ds, at, len(d.err.Problems) == before
}

var rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "period", "calendar", "burst", "limits", "penalty", "sync", "sync_interval"}

// limitNodes is one limit as written: envoyproxy/ratelimit's
// requests_per_unit and unit, or Sluice's period, calendar, algorithm and
// burst.
type limitNodes struct {
	count, unit, period, cal, alg, burst *yaml.Node
}

// set records v as the node of a limit's field key, and reports whether
// key is one.
func (ln *limitNodes) set(key string, v *yaml.Node) bool {
	switch key {
	case "requests_per_unit":
		ln.count = v
	case "unit":
		ln.unit = v
	case "period":
		ln.period = v
	case "calendar":
		ln.cal = v
	case "algorithm":
		ln.alg = v
	case "burst":
		ln.burst = v
	default:
		return false
	}
	return true
}

func (d *decoder) rateLimit(n *yaml.Node, path string) *descriptor.RateLimit {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "want a mapping of unit and requests_per_unit, or unlimited: true")
		return nil
	}
	rl := &descriptor.RateLimit{}
	var ln limitNodes
	var unlimitedNode, limitsNode, penaltyNode *yaml.Node
	var sn syncNodes
	d.stringFields(n, path, rateLimitFields, inRateLimit, func(key string, v *yaml.Node) {
		p := path + "." + key
		if ln.set(key, v) || d.syncField(key, v, p, &rl.Sync, &sn) {
			return
		}
		switch key {
		case "penalty":
			// The gateway's rules[].penalty, decoded by the same code.
			penaltyNode = v
			rl.Penalty = d.penalty(v, p)
		case "limits":
			limitsNode = v
		case "unlimited":
			unlimitedNode = v
			rl.Unlimited, _ = d.boolean(v, p)
		case "name":
			rl.Name, _ = d.scalar(v, p)
		case "replaces":
			rl.Replaces = d.replaces(v, p)
		}
	})
	for _, r := range rl.Replaces {
		if r != "" && r == rl.Name {
			d.add(n, path+".replaces", "replaces should not contain the name of the same descriptor (%q)", r)
		}
	}
	d.checkSync(sn, rl.Sync, path)
	if rl.Unlimited {
		for _, f := range []struct {
			n    *yaml.Node
			name string
		}{{ln.unit, "unit"}, {ln.period, "period"}, {ln.cal, "calendar"}, {ln.alg, "algorithm"}, {ln.burst, "burst"}, {limitsNode, "limits"}, {penaltyNode, "penalty"}, {sn.mode, "sync"}} {
			if f.n != nil {
				d.add(f.n, path+"."+f.name, "should not specify rate limit %s when unlimited", f.name)
			}
		}
		return rl
	}
	if unlimitedNode != nil && limitsNode == nil && ln == (limitNodes{}) {
		d.add(unlimitedNode, path, "unlimited is false: want unit and requests_per_unit")
		return rl
	}
	if limitsNode != nil {
		for _, f := range []struct {
			n    *yaml.Node
			name string
		}{{ln.count, "requests_per_unit"}, {ln.unit, "unit"}, {ln.period, "period"}, {ln.cal, "calendar"}, {ln.alg, "algorithm"}, {ln.burst, "burst"}} {
			if f.n != nil {
				d.add(f.n, path+"."+f.name, "give limits or %s, not both: move it into each of the limits", f.name)
			}
		}
		rl.Limits = d.limits(limitsNode, path+".limits")
		if len(rl.Limits) > 1 && rl.Sync.Mode != sluice.SyncExact {
			d.add(sn.mode, path+".sync", "sync %s applies to one limit, not the %d of limits", rl.Sync.Mode, len(rl.Limits))
		}
		d.checkSyncAlgorithms(sn, rl.Sync, rl.Limits, path)
		return rl
	}
	sluiceForm := ln.period != nil || ln.cal != nil || ln.alg != nil || ln.burst != nil
	if !sluiceForm {
		// envoyproxy/ratelimit's own form: a fixed window, 0 denies all.
		if ln.count == nil {
			d.add(n, path+".requests_per_unit", "missing: want a whole number of requests per unit")
		} else if c, ok := d.integer(ln.count, path+".requests_per_unit", 0, 1<<32-1); ok {
			rl.RequestsPerUnit = uint32(c)
			if c == 0 && penaltyNode != nil {
				d.add(penaltyNode, path+".penalty", "requests_per_unit 0 denies every request and counts nothing: a penalty needs a limit to count denials against")
			}
		}
		if ln.unit == nil {
			d.add(n, path+".unit", "missing: want second, minute, hour, day, week, month or year")
		} else if s, ok := d.scalar(ln.unit, path+".unit"); ok {
			u, err := descriptor.ParseUnit(s)
			if err != nil {
				d.add(ln.unit, path+".unit", "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", s)
			}
			rl.Unit = u
		}
		if rl.RequestsPerUnit > 0 && rl.Unit.Valid() {
			l := sluice.Limit{Algorithm: sluice.FixedWindow, Count: int64(rl.RequestsPerUnit), Period: rl.Unit.Duration()}
			if err := l.Validate(); err != nil {
				d.add(ln.count, path+".requests_per_unit", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
			} else {
				d.checkStore(l, ln.unit, path+".unit")
			}
		}
		return rl
	}
	if l, ok := d.limit(n, ln, path); ok {
		rl.Limits = []sluice.Limit{l}
		d.checkSyncAlgorithms(sn, rl.Sync, rl.Limits, path)
	}
	return rl
}

func (d *decoder) replaces(n *yaml.Node, path string) []string {
	n = resolve(n)
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "want a list of {name: ...}")
		return nil
	}
	var out []string
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		var name string
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			d.add(item, p, "want a mapping with name, got %q", item.Value)
			continue
		}
		before := len(d.err.Problems)
		d.stringFields(item, p, []string{"name"}, nil, func(_ string, v *yaml.Node) {
			name, _ = d.scalar(v, p+".name")
		})
		if len(d.err.Problems) > before {
			continue
		}
		if name == "" {
			d.add(item, p+".name", "should not have an empty replaces entry: want the name of the limit to replace")
			continue
		}
		out = append(out, name)
	}
	return out
}

var limitFields = []string{"requests_per_unit", "unit", "period", "calendar", "algorithm", "burst"}

func (d *decoder) limits(n *yaml.Node, path string) []sluice.Limit {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 || len(n.Content) > sluice.MaxLimits {
		d.add(n, path, "want a list of 1 to %d limits, each with requests_per_unit and unit or period", sluice.MaxLimits)
		return nil
	}
	var out []sluice.Limit
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			d.add(item, p, "want a mapping with requests_per_unit and unit or period")
			continue
		}
		var ln limitNodes
		d.stringFields(item, p, limitFields, nil, func(key string, v *yaml.Node) { ln.set(key, v) })
		if l, ok := d.limit(item, ln, p); ok {
			out = append(out, l)
		}
	}
	return out
}

// limit decodes one limit in Sluice's form: requests_per_unit (at least 1)
// per unit or period, algorithm (default fixed_window, as
// envoyproxy/ratelimit counts) and burst. A period of day, week, month or
// year is a calendar quota (see package calendar), its calendar mapping
// decoded as the gateway's rules[].calendar is; unit keeps
// envoyproxy/ratelimit's fixed lengths (a month of 30 days).
func (d *decoder) limit(at *yaml.Node, ln limitNodes, path string) (sluice.Limit, bool) {
	l := sluice.Limit{Algorithm: sluice.FixedWindow}
	var unit calendar.Unit
	periodOK := true
	before := len(d.err.Problems)
	if ln.count == nil {
		d.add(at, path+".requests_per_unit", "missing: want a whole number of requests per unit or period")
	} else if c, ok := d.integer(ln.count, path+".requests_per_unit", 1, 1_000_000_000_000); ok {
		l.Count = c
	}
	switch {
	case ln.unit != nil && ln.period != nil:
		d.add(ln.period, path+".period", "give unit or period, not both")
	case ln.unit != nil:
		if s, ok := d.scalar(ln.unit, path+".unit"); ok {
			u, err := descriptor.ParseUnit(s)
			if err != nil {
				d.add(ln.unit, path+".unit", "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", s)
			}
			l.Period = u.Duration()
		}
	case ln.period != nil:
		t, u, ok := d.period(ln.period, path+".period")
		l.Period, unit, periodOK = t, u, ok
	default:
		d.add(at, path+".unit", "missing: want a unit (second to year) or a period (such as 30s)")
	}
	switch {
	case ln.cal != nil && ln.unit != nil:
		d.add(ln.cal, path+".calendar", "a calendar applies only to period: day, week, month or year; unit: %s is a fixed length, as envoyproxy/ratelimit counts it", resolve(ln.unit).Value)
	case periodOK && (ln.cal != nil || unit != 0):
		spec := limitSpec{periodNode: ln.period}
		if ln.cal != nil {
			spec.cal = d.calendar(ln.cal, path+".calendar")
		}
		if c, ok := d.calendarOf(&spec, unit, nil, path); ok {
			l.Calendar = c
		}
	}
	if ln.alg != nil {
		if s, ok := d.scalar(ln.alg, path+".algorithm"); ok {
			a, err := sluice.ParseAlgorithm(s)
			if err != nil {
				d.add(ln.alg, path+".algorithm", "unknown algorithm %q (want token_bucket, gcra, fixed_window, sliding_window or sliding_log)", s)
			}
			l.Algorithm = a
		}
	}
	if ln.burst != nil {
		if b, ok := d.integer(ln.burst, path+".burst", 1, 1_000_000_000_000); ok {
			l.Burst = b
		}
	}
	if len(d.err.Problems) > before {
		return l, false
	}
	if err := l.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": ")
		where, field := at, ""
		switch {
		case strings.Contains(msg, "burst") && ln.burst != nil:
			where, field = ln.burst, ".burst"
		case strings.Contains(msg, "period") && ln.period != nil:
			where, field = ln.period, ".period"
		case strings.Contains(msg, "count") || strings.Contains(msg, "rate"):
			where, field = ln.count, ".requests_per_unit"
		}
		d.add(where, path+field, "%s", msg)
		return l, false
	}
	at2, field := ln.period, ".period"
	if at2 == nil {
		at2, field = ln.unit, ".unit"
	}
	if !d.checkStore(l, at2, path+field) {
		return l, false
	}
	return l, true
}

// checkStore reports a valid limit that the chosen store cannot run, at
// node n, and tells whether the store can run it.
func (d *decoder) checkStore(l sluice.Limit, n *yaml.Node, path string) bool {
	if d.storeCheck == nil {
		return true
	}
	if err := d.storeCheck(l); err != nil {
		d.add(n, path, "%v", err)
		return false
	}
	return true
}

// checkEnforce reports an enforce on a descriptor of ds (at path) counted
// as one counter: no level of its path, from the top (perValue tells for
// the levels above ds), is counted per value. It runs on a file without
// other problems, whose descriptors keep the indices they have in the file.
func (d *descDecoder) checkEnforce(ds []descriptor.Descriptor, path string, perValue bool) {
	for i, x := range ds {
		p := fmt.Sprintf("%s[%d]", path, i)
		pv := perValue || x.Value == "" || strings.Contains(x.Value, "*") && !x.ShareThreshold
		if x.Enforce != nil && !pv {
			d.add(d.enforce[p], p+".enforce", "needs a level counted per value (an entry without a value, or a wildcard without share_threshold) on the way to this descriptor: it has one counter, which would be enforced or not as a whole")
		}
		d.checkEnforce(x.Descriptors, p+".descriptors", pv)
	}
}
