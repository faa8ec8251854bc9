package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The YAML walker every section decodes with: it reports each problem with
// its path, line and column, and keeps going so that one pass finds them all.

// decoder walks the YAML tree, collecting problems.
type decoder struct {
	err *Error
}

func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	p := Problem{Path: path, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.err.Problems = append(d.err.Problems, p)
}

// yamlError turns a syntax error ("yaml: line 3: ...") into a problem.
func (d *decoder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Problem{Message: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if l, err := strconv.Atoi(rest[:i]); err == nil {
				p.Line, p.Column, p.Message = l, 1, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	d.err.Problems = append(d.err.Problems, p)
}

// fields calls f for each key of mapping n, reporting unknown keys (with a
// suggestion), duplicates and a non-mapping n.
func (d *decoder) fields(n *yaml.Node, path string, known []string, f func(key string, v *yaml.Node)) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return
		}
		d.add(n, path, "want a mapping of %s", strings.Join(known, ", "))
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
		d.add(n, path, "want a string")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.add(n, path, "want a whole number, got %q", n.Value)
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
		d.add(n, path, "want a duration such as 10s, 1m or 1h")
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
		d.add(n, path, "want a list, such as [a, b]")
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

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
