package config

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
)

// The YAML walker every section decodes with: it reports each problem with
// its path, line and column, and keeps going so that one pass finds them all.

// decoder walks the YAML tree, collecting problems.
type decoder struct {
	err *Error
	// check, if set, reports a valid limit that the chosen store still
	// cannot run (see DescriptorOptions.Check).
	storeCheck func(sluice.Limit) error
	// listsByName holds the lists section's lists, decoded before the
	// rules that name them; nil for a list with problems.
	listsByName map[string]*httplimit.List
}

func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	p := Problem{Path: path, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.err.Problems = append(d.err.Problems, p)
}

// yamlError turns a syntax error into a problem at the line and column of
// the mistake. The YAML parser reports the line where the enclosing
// collection began (zero-based, for most errors), which can be far above
// the mistake: "did not find expected '-' indicator" at the line of a list
// whose fifth line is misindented. So yamlError finds the first position at
// which a prefix of data fails with the same message: the prefix that ends
// there holds the mistake, and the prefix one byte shorter does not.
func (d *decoder) yamlError(data []byte, err error) {
	msg := syntaxMessage(err)
	fails := func(n int) bool {
		var doc yaml.Node
		err := yaml.Unmarshal(data[:n], &doc)
		return err != nil && syntaxMessage(err) == msg
	}
	p := Problem{Message: msg}
	if fails(len(data)) && !fails(0) {
		// Find the line, then the column: binary searches that keep
		// fails(lo) false and fails(hi) true, a few dozen parses at most
		// (milliseconds for a config file, seconds for a broken list of
		// 40,000 entries near MaxSize).
		lines := lineStarts(data) // the offset at which each line starts, then len(data)
		if lines[len(lines)-1] != len(data) {
			lines = append(lines, len(data))
		}
		lo, hi := 0, len(lines)-1 // indexes into lines
		// The mistake is not above the line the parser names: skip the
		// lines before it (one line more, for its zero-based numbers).
		if l := syntaxLine(err) - 1; l > 0 && l < hi && !fails(lines[l]) {
			lo = l
		}
		for hi-lo > 1 {
			if m := (lo + hi) / 2; fails(lines[m]) {
				hi = m
			} else {
				lo = m
			}
		}
		start, end := lines[lo], lines[hi]
		line := data[start:end]
		olo, ohi := start, end // byte offsets
		for ohi-olo > 1 {
			if m := (olo + ohi) / 2; fails(m) {
				ohi = m
			} else {
				olo = m
			}
		}
		at := ohi - 1 // the byte whose addition makes the prefix fail
		if at >= start+len(bytes.TrimRight(line, "\r\n\u0085\u2028\u2029")) {
			// The line as a whole is wrong: point at its first character.
			at = start + len(line) - len(bytes.TrimLeft(line, " \t"))
			if at >= end {
				at = start
			}
		}
		p.Line, p.Column = lo+1, utf8.RuneCount(data[start:at])+1
	}
	if h, ok := syntaxHints[msg]; ok {
		p.Message += " (" + h + ")"
	}
	d.err.Problems = append(d.err.Problems, p)
}

// lineStarts returns the offset at which each line of data starts, the
// first being 0. Lines end where the YAML parser ends them, so that a
// syntax error's line is the line of the parser's other positions: at LF,
// CRLF and a bare CR (the line breaks of YAML 1.2), and at NEL, LS and PS,
// which the parser also counts, as YAML 1.1 did.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i := 0; i < len(data); i++ {
		switch {
		case data[i] == '\n':
		case data[i] == '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				i++
			}
		case bytes.HasPrefix(data[i:], []byte("\u0085")):
			i++
		case bytes.HasPrefix(data[i:], []byte("\u2028")), bytes.HasPrefix(data[i:], []byte("\u2029")):
			i += 2
		default:
			continue
		}
		starts = append(starts, i+1)
	}
	return starts
}

// syntaxLine is the line number in a YAML syntax error, or 0.
func syntaxLine(err error) int {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(err.Error(), "yaml: "), "line ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:max(strings.IndexByte(rest, ':'), 0)])
	return n
}

// syntaxMessage is a YAML syntax error's message without "yaml: " and the
// parser's "line N: ".
func syntaxMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if _, err := strconv.Atoi(rest[:i]); err == nil {
				msg = strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return msg
}

// syntaxHints explains the YAML parser's most common messages.
var syntaxHints = map[string]string{
	"did not find expected '-' indicator":             "is this line indented as far as the list's other entries and their fields?",
	"did not find expected key":                       "is this line indented as far as the fields above it?",
	"found a tab character that violates indentation": "indent with spaces, not tabs",
	"mapping values are not allowed in this context":  "quote a value that contains \": \", and check this line's indentation",
	"found character that cannot start any token":     "indent with spaces, not tabs, and quote values that start with @ or `",
	"did not find expected ',' or ']'":                "is a ] missing?",
	"did not find expected ',' or '}'":                "is a } missing?",
	"found unexpected end of stream":                  "is a closing quote missing?",
}

// fields calls f for each key of mapping n, reporting unknown keys (with a
// suggestion), duplicates and a non-mapping n. known is one of the
// package's field lists (serverFields and the like): a test holds
// docs/config.md to document every field of each.
func (d *decoder) fields(n *yaml.Node, path string, known []string, f func(key string, v *yaml.Node)) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return
		}
		d.add(n, path, "want a mapping of %s, got %s", strings.Join(known, ", "), found(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		p := join(path, key)
		switch {
		case seen[key]:
			d.add(k, p, "appears twice")
		case !slices.Contains(known, key):
			if s := suggest(key, known); s != "" {
				d.add(k, p, "unknown field (did you mean %q?)", s)
			} else {
				d.add(k, p, "unknown field (want one of %s)", strings.Join(known, ", "))
			}
		default:
			seen[key] = true
			f(key, v)
		}
	}
}

// lookup returns the value at keys below mapping n, or nil if there is
// none.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	at := n
	for _, k := range keys {
		m := resolve(at)
		if m.Kind != yaml.MappingNode {
			return nil
		}
		at = nil
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == k {
				at = m.Content[i+1]
			}
		}
		if at == nil {
			return nil
		}
	}
	return at
}

// found describes what a node holds, for "want X, got Y" problems: a
// scalar as written, quoted; otherwise its kind.
func found(n *yaml.Node) string {
	n = resolve(n)
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.AliasNode:
		return "an alias to nothing"
	case n.Tag == "!!null" && (n.Value == "" || n.Value == "~"):
		return "nothing"
	}
	return strconv.Quote(n.Value)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest returns the known name closest to key, if it is close.
func suggest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if dd := distance(strings.ToLower(key), k); dd < bestD {
			best, bestD = k, dd
		}
	}
	return best
}

// distance is the Levenshtein distance, for suggestions.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.add(n, path, "want a string, got %s", found(n))
		return "", false
	}
	return n.Value, true
}

// nonEmpty decodes a string that must not be empty. An empty one is
// reported at n with the message empty, which says what the field wants.
func (d *decoder) nonEmpty(n *yaml.Node, path, empty string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.add(n, path, "%s", empty)
		return "", false
	}
	return s, ok
}

func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.add(n, path, "want a whole number, got %s", found(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < lo || v > hi {
		d.add(n, path, "want a whole number from %d to %d, got %s", lo, hi, n.Value)
		return 0, false
	}
	return v, true
}

func (d *decoder) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.add(n, path, "want a duration such as 10s, 1m or 1h, got %s", found(n))
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		if _, ierr := strconv.ParseFloat(n.Value, 64); ierr == nil {
			d.add(n, path, "want a duration with a unit, such as %ss, got %s", n.Value, n.Value)
		} else {
			d.add(n, path, "want a duration such as 10s, 1m or 1h, got %q", n.Value)
		}
		return 0, false
	}
	if v < lo || v > hi {
		d.add(n, path, "want a duration from %v to %v, got %v", lo, hi, v)
		return 0, false
	}
	return v, true
}

// strings decodes a sequence of strings; a single string is a list of one
// when single is set.
func (d *decoder) strings(n *yaml.Node, path string, single bool) ([]string, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && single && n.Tag != "!!null" {
		return []string{n.Value}, true
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "want a list, such as [a, b], got %s", found(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for i, e := range n.Content {
		s, sok := d.str(e, fmt.Sprintf("%s[%d]", path, i))
		ok = ok && sok
		out = append(out, s)
	}
	return out, ok
}

// reason returns err's message without the sentinels in it ("httplimit:
// invalid rule: ", "sluice: invalid sync: "), for a problem reported at its
// line: the packages' own checks, worded once.
func reason(err error) string {
	msg := err.Error()
	for _, s := range []error{httplimit.ErrInvalidRule, sluice.ErrInvalidSync, sluice.ErrInvalidLimit, sluice.ErrInvalidPenalty} {
		msg = strings.ReplaceAll(msg, s.Error()+": ", "")
	}
	return msg
}

// document parses data, a whole file, and returns its top-level node, or
// reports why it has none: too large, a syntax error, or empty (with
// empty as the message).
func (d *decoder) document(data []byte, emptyPath, empty string) (*yaml.Node, bool) {
	if len(data) > MaxSize {
		d.add(nil, "", "the file is larger than %d bytes", MaxSize)
		return nil, false
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		d.yamlError(data, err)
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		d.add(nil, emptyPath, "%s", empty)
		return nil, false
	}
	return doc.Content[0], true
}

// hostPort decodes a listener's address: host:port, the port a number
// from 0 to 65535 (0 picks a free port) or a service name this host knows
// (http). The host may be empty (every address) or a name.
func (d *decoder) hostPort(n *yaml.Node, path, example string) (string, bool) {
	a, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil || port == "" {
		d.add(n, path, "want host:port, such as %s, got %q", example, a)
		return "", false
	}
	numeric := strings.Trim(port, "+-0123456789") == ""
	if _, err := net.LookupPort("tcp", port); err != nil || (numeric && strings.ContainsAny(port, "+-")) {
		if numeric {
			d.add(n, path, "port %s: want a number from 0 to 65535 (0 for any free port), such as %s", port, example)
		} else {
			d.add(n, path, "port %q: want a number from 0 to 65535 or a known service name such as http, got %q", port, a)
		}
		return "", false
	}
	return a, true
}

// prefixes decodes a list of CIDRs or IP addresses (an address is its own
// /32 or /128), reporting each bad one at its line.
func (d *decoder) prefixes(n *yaml.Node, path string) ([]netip.Prefix, bool) {
	ss, ok := d.strings(n, path, false)
	if !ok {
		return nil, false
	}
	var out []netip.Prefix
	for i, s := range ss {
		pp, err := clientip.ParsePrefixes([]string{s})
		if err != nil {
			d.add(resolve(n).Content[i], fmt.Sprintf("%s[%d]", path, i), "want a CIDR such as 10.0.0.0/8 or an IP address, got %q", s)
			ok = false
			continue
		}
		out = append(out, pp...)
	}
	return out, ok
}
