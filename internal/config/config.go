// Package config reads the sluice gateway's config file (YAML; see
// examples/quickstart.yaml) into the options of packages httplimit,
// clientip and redisstore. Every problem is reported at once, each with the
// field's path and its line and column.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/redisstore"
)

// MaxSize is the largest config file accepted, in bytes.
const MaxSize = 1 << 20

// ErrInvalid is wrapped by every error that reports problems in a file.
var ErrInvalid = errors.New("invalid config")

// Problem is one mistake in a file.
type Problem struct {
	Line, Column int    // 1-based; 0 when unknown
	Path         string // such as "rules[2].limit"
	Message      string
}

// Error lists every problem found in one file. It wraps ErrInvalid.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", p.Line, p.Column)
		}
		b.WriteString(": ")
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Config is a validated config file.
type Config struct {
	Server   Server
	Upstream string // "builtin:echo" or an http(s) URL
	Store    Store
	// ClientIP configures how the "ip" key part finds the client.
	ClientIP clientip.Options
	// Limiter holds the rules, tiers, headers and over-limit header;
	// Store, ClientIP and Observer are left for the gateway to fill.
	Limiter httplimit.Options
	// RejectionLogsPerSecond bounds the WARN lines for rejections
	// (log.rejections_per_second, default 10).
	RejectionLogsPerSecond int64
}

// Server is the server section.
type Server struct {
	Listen            string        // default 127.0.0.1:8080
	Admin             string        // default 127.0.0.1:9090; "off" disables
	ShutdownTimeout   time.Duration // default 10s
	ReadHeaderTimeout time.Duration // default 10s
	MaxHeaderBytes    int           // default 64 KiB
}

// Store is the store section.
type Store struct {
	Backend string // "memory" (default) or "redis"
	MaxKeys int    // default 1,000,000
	Redis   redisstore.Options
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: reading %s: %w", path, err)
	}
	return Parse(data, path)
}

// Parse validates data, the contents of the file called name.
func Parse(data []byte, name string) (*Config, error) {
	d := &decoder{err: &Error{File: name}}
	if len(data) > MaxSize {
		d.add(nil, "", "the file is larger than %d bytes", MaxSize)
		return nil, d.err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		d.yamlError(err)
		return nil, d.err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		d.add(nil, "", "the file is empty; see examples/quickstart.yaml")
		return nil, d.err
	}
	c := d.config(doc.Content[0])
	if len(d.err.Problems) > 0 {
		return nil, d.err
	}
	return c, nil
}

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

func (d *decoder) config(root *yaml.Node) *Config {
	c := &Config{
		Server: Server{Listen: "127.0.0.1:8080", Admin: "127.0.0.1:9090", ShutdownTimeout: 10 * time.Second,
			ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10},
		Store:                  Store{Backend: "memory", MaxKeys: 1_000_000},
		RejectionLogsPerSecond: 10,
	}
	c.Limiter.Headers = httplimit.HeadersIETF | httplimit.HeadersLegacy
	c.Limiter.Tiers.Default = "free"
	if resolve(root).Kind != yaml.MappingNode {
		d.add(root, "", "want a mapping with server, upstream, store, client_ip, headers, tiers and rules; see examples/quickstart.yaml")
		return c
	}
	var storeNode, redisNode, rulesNode, tiersNode *yaml.Node
	hasUpstream := false
	d.fields(root, "", []string{"server", "upstream", "store", "client_ip", "headers", "tiers", "rules", "log"}, func(key string, v *yaml.Node) {
		switch key {
		case "server":
			d.server(v, &c.Server, &c.Limiter)
		case "upstream":
			hasUpstream = true
			if s, ok := d.str(v, key); ok {
				c.Upstream = s
				if s != "builtin:echo" {
					u, err := url.Parse(s)
					if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						d.add(v, key, "want builtin:echo or an http:// or https:// URL with a host, got %q", s)
					}
				}
			}
		case "store":
			storeNode = v
			redisNode = d.store(v, &c.Store)
		case "client_ip":
			d.clientIP(v, &c.ClientIP)
		case "headers":
			c.Limiter.Headers = d.headers(v)
		case "tiers":
			tiersNode = v
			d.tiers(v, &c.Limiter.Tiers)
		case "rules":
			rulesNode = v
		case "log":
			d.fields(v, key, []string{"rejections_per_second"}, func(k string, v *yaml.Node) {
				if n, ok := d.integer(v, "log."+k, 0, 1_000_000); ok {
					c.RejectionLogsPerSecond = n
					if n == 0 {
						c.RejectionLogsPerSecond = -1 // none
					}
				}
			})
		}
	})
	if !hasUpstream {
		d.add(root, "upstream", "missing: want builtin:echo or the URL of the API to protect")
	}
	switch {
	case c.Store.Backend == "redis" && redisNode == nil:
		d.add(storeNode, "store.redis", "missing: the redis backend needs a url, or addrs for a cluster or Sentinel")
	case c.Store.Backend == "memory" && redisNode != nil:
		d.add(redisNode, "store.redis", "only for backend redis; the backend is memory")
	}
	if rulesNode == nil {
		d.add(root, "rules", "missing: want at least one rule")
	} else {
		c.Limiter.Rules = d.rules(rulesNode, c.Limiter.Tiers)
	}
	_ = tiersNode
	return c
}

func (d *decoder) server(n *yaml.Node, s *Server, lo *httplimit.Options) {
	d.fields(n, "server", []string{"listen", "admin", "shutdown_timeout", "read_header_timeout", "max_header_bytes", "over_limit_header"}, func(key string, v *yaml.Node) {
		p := "server." + key
		switch key {
		case "listen", "admin":
			a, ok := d.str(v, p)
			if !ok {
				return
			}
			if key == "admin" && (a == "off" || a == "") {
				s.Admin = ""
				return
			}
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				d.add(v, p, "want host:port, such as 127.0.0.1:8080, got %q", a)
				return
			}
			if key == "listen" {
				s.Listen = a
			} else {
				s.Admin = a
			}
		case "shutdown_timeout":
			if t, ok := d.duration(v, p, 0, time.Hour); ok {
				s.ShutdownTimeout = t
			}
		case "read_header_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Hour); ok {
				s.ReadHeaderTimeout = t
			}
		case "max_header_bytes":
			if b, ok := d.integer(v, p, 1024, 16<<20); ok {
				s.MaxHeaderBytes = int(b)
			}
		case "over_limit_header":
			if h, ok := d.str(v, p); ok {
				if h == "" || strings.ContainsAny(h, " \t:\"(),/;<=>?@[\\]{}") {
					d.add(v, p, "%q is not a valid header name", h)
					return
				}
				lo.OverLimitHeader = h
			}
		}
	})
}

// store decodes the store section and returns its redis node, if any.
func (d *decoder) store(n *yaml.Node, s *Store) *yaml.Node {
	var redisNode *yaml.Node
	d.fields(n, "store", []string{"backend", "max_keys", "redis", "on_error"}, func(key string, v *yaml.Node) {
		p := "store." + key
		switch key {
		case "backend":
			if b, ok := d.str(v, p); ok {
				if b != "memory" && b != "redis" {
					d.add(v, p, "want memory or redis, got %q", b)
					return
				}
				s.Backend = b
			}
		case "max_keys":
			if m, ok := d.integer(v, p, 1, 1_000_000_000); ok {
				s.MaxKeys = int(m)
			}
		case "on_error":
			if f, ok := d.str(v, p); ok {
				fl, err := redisstore.ParseFailure(f)
				if err != nil {
					d.add(v, p, "want allow, deny or local, got %q", f)
					return
				}
				s.Redis.OnError = fl
			}
		case "redis":
			redisNode = v
			d.redis(v, &s.Redis)
		}
	})
	return redisNode
}

func (d *decoder) redis(n *yaml.Node, r *redisstore.Options) {
	hasAddr := false
	d.fields(n, "store.redis", []string{"url", "addrs", "master_set", "username", "password", "db", "timeout", "prefix"}, func(key string, v *yaml.Node) {
		p := "store.redis." + key
		switch key {
		case "url":
			if u, ok := d.str(v, p); ok {
				pu, err := url.Parse(u)
				if err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
					d.add(v, p, "want a redis://, rediss:// or unix:// URL")
					return
				}
				r.URL, hasAddr = u, true
			}
		case "addrs":
			if as, ok := d.strings(v, p, false); ok {
				for i, a := range as {
					if _, _, err := net.SplitHostPort(a); err != nil {
						d.add(resolve(v).Content[i], fmt.Sprintf("%s[%d]", p, i), "want host:port, got %q", a)
					}
				}
				r.Addrs, hasAddr = as, len(as) > 0
			}
		case "master_set":
			r.MasterSet, _ = d.str(v, p)
		case "username":
			r.Username, _ = d.str(v, p)
		case "password":
			r.Password, _ = d.str(v, p)
		case "db":
			if db, ok := d.integer(v, p, 0, 1<<20); ok {
				r.DB = int(db)
			}
		case "timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Minute); ok {
				r.Timeout = t
			}
		case "prefix":
			if s, ok := d.str(v, p); ok {
				if s == "" || len(s) > 64 || strings.ContainsAny(s, "{} \t\r\n") {
					d.add(v, p, "want 1 to 64 characters without braces or spaces, got %q", s)
					return
				}
				r.Prefix = s
			}
		}
	})
	if !hasAddr && resolve(n).Kind == yaml.MappingNode {
		d.add(n, "store.redis", "want url, or addrs for a cluster or Sentinel")
	}
	if r.URL != "" && len(r.Addrs) > 0 {
		d.add(n, "store.redis", "give url or addrs, not both")
	}
}

func (d *decoder) clientIP(n *yaml.Node, o *clientip.Options) {
	d.fields(n, "client_ip", []string{"trusted_proxies", "header", "ipv4_prefix", "ipv6_prefix"}, func(key string, v *yaml.Node) {
		p := "client_ip." + key
		switch key {
		case "trusted_proxies":
			ss, ok := d.strings(v, p, false)
			if !ok {
				return
			}
			for i, s := range ss {
				pp, err := clientip.ParsePrefixes([]string{s})
				if err != nil {
					d.add(resolve(v).Content[i], fmt.Sprintf("%s[%d]", p, i), "want a CIDR such as 10.0.0.0/8 or an IP address, got %q", s)
					continue
				}
				o.TrustedProxies = append(o.TrustedProxies, pp...)
			}
		case "header":
			if h, ok := d.str(v, p); ok {
				if _, err := clientip.New(clientip.Options{Header: h}); err != nil {
					d.add(v, p, "want X-Forwarded-For, Forwarded or X-Real-IP, got %q", h)
					return
				}
				o.Header = h
			}
		case "ipv4_prefix":
			if b, ok := d.integer(v, p, 1, 32); ok {
				o.IPv4Prefix = int(b)
			}
		case "ipv6_prefix":
			if b, ok := d.integer(v, p, 1, 128); ok {
				o.IPv6Prefix = int(b)
			}
		}
	})
}

func (d *decoder) headers(n *yaml.Node) httplimit.Headers {
	ss, ok := d.strings(n, "headers", false)
	if !ok {
		return httplimit.HeadersIETF | httplimit.HeadersLegacy
	}
	var h httplimit.Headers
	for i, s := range ss {
		switch strings.ToLower(s) {
		case "ietf":
			h |= httplimit.HeadersIETF
		case "legacy":
			h |= httplimit.HeadersLegacy
		default:
			d.add(resolve(n).Content[i], fmt.Sprintf("headers[%d]", i), "want ietf or legacy, got %q", s)
		}
	}
	if h == 0 {
		h = httplimit.HeadersNone
	}
	return h
}

func (d *decoder) tiers(n *yaml.Node, t *httplimit.Tiers) {
	d.fields(n, "tiers", []string{"from", "default", "keys"}, func(key string, v *yaml.Node) {
		p := "tiers." + key
		switch key {
		case "from":
			if s, ok := d.str(v, p); ok {
				k, err := httplimit.ParseKeyPart(s)
				switch {
				case err != nil:
					d.add(v, p, "%s", strings.TrimPrefix(err.Error(), httplimit.ErrInvalidRule.Error()+": "))
				case k.Source == httplimit.SourceGlobal:
					d.add(v, p, "a tier cannot come from global")
				default:
					t.From = k
				}
			}
		case "default":
			if s, ok := d.str(v, p); ok {
				if !validName(s) {
					d.add(v, p, "want 1 to 64 characters from A-Z a-z 0-9 . _ -, got %q", s)
					return
				}
				t.Default = s
			}
		case "keys":
			v = resolve(v)
			if v.Kind != yaml.MappingNode {
				d.add(v, p, "want a mapping from a value (such as an API key) to a tier name")
				return
			}
			t.Keys = make(map[string]string, len(v.Content)/2)
			for i := 0; i+1 < len(v.Content); i += 2 {
				k, tv := v.Content[i], v.Content[i+1]
				tier, ok := d.str(tv, p+"."+k.Value)
				if !ok {
					continue
				}
				if !validName(tier) {
					d.add(tv, p+"."+k.Value, "tier name %q: want 1 to 64 characters from A-Z a-z 0-9 . _ -", tier)
				}
				if _, dup := t.Keys[k.Value]; dup {
					d.add(k, p+"."+k.Value, "appears twice")
				}
				t.Keys[k.Value] = tier
			}
		}
	})
	if t.Keys != nil && t.From == (httplimit.KeyPart{}) {
		d.add(n, "tiers.keys", "needs tiers.from: the request attribute (such as header:X-API-Key) to look up")
	}
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

var ruleFields = []string{"name", "match", "key", "missing", "algorithm", "limit", "period", "burst", "tiers", "action", "max_delay"}

func (d *decoder) rules(n *yaml.Node, tiers httplimit.Tiers) []httplimit.Rule {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.add(n, "rules", "want a list of rules")
		return nil
	}
	if len(n.Content) == 0 {
		d.add(n, "rules", "want at least one rule")
	}
	var out []httplimit.Rule
	names := map[string]int{}
	for i, rn := range n.Content {
		path := fmt.Sprintf("rules[%d]", i)
		r, ok := d.rule(rn, path)
		if !ok {
			continue
		}
		if j, dup := names[r.Name]; dup {
			d.add(rn, path+".name", "%q is also the name of rules[%d]; names must be unique", r.Name, j)
			continue
		}
		names[r.Name] = i
		if tiers.Keys != nil {
			for t := range r.Tiers {
				if t != tiers.Default && !slices.Contains(mapValues(tiers.Keys), t) {
					d.add(rn, path+".tiers."+t, "no entry of tiers.keys maps to tier %q, and it is not the default tier", t)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// limitSpec is the limit fields of a rule or a tier, as written.
type limitSpec struct {
	alg                   sluice.Algorithm
	count, burst          int64
	period                time.Duration
	hasAlg, hasCount      bool
	hasPeriod, hasBurst   bool
	algNode, countNode    *yaml.Node
	periodNode, burstNode *yaml.Node
}

func (d *decoder) limitField(key string, v *yaml.Node, path string, l *limitSpec) {
	p := path + "." + key
	switch key {
	case "algorithm":
		l.hasAlg = true
		if s, ok := d.str(v, p); ok {
			a, err := sluice.ParseAlgorithm(s)
			if err != nil {
				d.add(v, p, "unknown algorithm %q (want token_bucket, gcra, fixed_window, sliding_window or sliding_log)", s)
				return
			}
			l.alg, l.hasAlg, l.algNode = a, true, v
		}
	case "limit":
		l.hasCount = true
		if c, ok := d.integer(v, p, 1, 1_000_000_000_000); ok {
			l.count, l.hasCount, l.countNode = c, true, v
		}
	case "period":
		l.hasPeriod = true
		if t, ok := d.duration(v, p, time.Microsecond, 365*24*time.Hour); ok {
			l.period, l.hasPeriod, l.periodNode = t, true, v
		}
	case "burst":
		l.hasBurst = true
		if b, ok := d.integer(v, p, 1, 1_000_000_000_000); ok {
			l.burst, l.hasBurst, l.burstNode = b, true, v
		}
	}
}

// check validates a built limit, reporting the problem at the field it
// concerns.
func (d *decoder) check(l sluice.Limit, spec *limitSpec, node *yaml.Node, path string) bool {
	err := l.Validate()
	if err == nil {
		return true
	}
	msg := strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": ")
	at, field := node, ""
	switch {
	case strings.Contains(msg, "burst") && spec.burstNode != nil:
		at, field = spec.burstNode, ".burst"
	case strings.Contains(msg, "period") && spec.periodNode != nil:
		at, field = spec.periodNode, ".period"
	case (strings.Contains(msg, "count") || strings.Contains(msg, "rate")) && spec.countNode != nil:
		at, field = spec.countNode, ".limit"
	}
	d.add(at, path+field, "%s", msg)
	return false
}

func (d *decoder) rule(n *yaml.Node, path string) (httplimit.Rule, bool) {
	var r httplimit.Rule
	var spec limitSpec
	var keyNode, actionNode, maxDelayNode *yaml.Node
	tierSpecs := map[string]*limitSpec{}
	tierNodes := map[string]*yaml.Node{}
	var tierOrder []string
	before := len(d.err.Problems)
	hasName := false
	d.fields(n, path, ruleFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "name":
			if s, ok := d.str(v, p); ok {
				hasName = true
				if !validName(s) {
					d.add(v, p, "want 1 to 64 characters from A-Z a-z 0-9 . _ -, got %q", s)
				}
				r.Name = s
			}
		case "match":
			d.match(v, p, &r.Match)
		case "key":
			keyNode = v
			if ss, ok := d.strings(v, p, true); ok {
				for i, s := range ss {
					k, err := httplimit.ParseKeyPart(s)
					if err != nil {
						at := resolve(v)
						if at.Kind == yaml.SequenceNode {
							at = at.Content[i]
						}
						d.add(at, fmt.Sprintf("%s[%d]", p, i), "%s", strings.TrimPrefix(err.Error(), httplimit.ErrInvalidRule.Error()+": "))
						continue
					}
					r.Key = append(r.Key, k)
				}
			}
		case "missing":
			if s, ok := d.str(v, p); ok {
				m, err := httplimit.ParseMissing(s)
				if err != nil {
					d.add(v, p, "want ip or skip, got %q", s)
					return
				}
				r.Missing = m
			}
		case "action":
			actionNode = v
			if s, ok := d.str(v, p); ok {
				a, err := httplimit.ParseAction(s)
				if err != nil {
					d.add(v, p, "want reject, delay, shadow, soft or exempt, got %q", s)
					return
				}
				r.Action = a
			}
		case "max_delay":
			maxDelayNode = v
			if t, ok := d.duration(v, p, time.Millisecond, sluice.MaxWait); ok {
				r.MaxDelay = t
			}
		case "tiers":
			v = resolve(v)
			if v.Kind != yaml.MappingNode {
				d.add(v, p, "want a mapping from tier name to { limit, burst, period, algorithm }")
				return
			}
			for i := 0; i+1 < len(v.Content); i += 2 {
				tk, tv := v.Content[i], v.Content[i+1]
				name := tk.Value
				tp := p + "." + name
				if !validName(name) {
					d.add(tk, tp, "tier name %q: want 1 to 64 characters from A-Z a-z 0-9 . _ -", name)
					continue
				}
				if _, dup := tierSpecs[name]; dup {
					d.add(tk, tp, "appears twice")
					continue
				}
				ts := &limitSpec{}
				d.fields(tv, tp, []string{"algorithm", "limit", "period", "burst"}, func(key string, v *yaml.Node) {
					d.limitField(key, v, tp, ts)
				})
				tierSpecs[name], tierNodes[name] = ts, tv
				tierOrder = append(tierOrder, name)
			}
		default:
			d.limitField(key, v, path, &spec)
		}
	})
	if resolve(n).Kind != yaml.MappingNode {
		return r, false
	}
	if !hasName {
		d.add(n, path+".name", "missing: every rule needs a name")
	}
	if r.Action == httplimit.Exempt {
		for _, f := range []struct {
			set  bool
			name string
		}{{keyNode != nil, "key"}, {spec.hasAlg, "algorithm"}, {spec.hasCount, "limit"}, {spec.hasPeriod, "period"}, {spec.hasBurst, "burst"}, {len(tierSpecs) > 0, "tiers"}, {maxDelayNode != nil, "max_delay"}} {
			if f.set {
				d.add(actionNode, path+"."+f.name, "an exempt rule takes no %s", f.name)
			}
		}
		return r, len(d.err.Problems) == before
	}
	for _, f := range []struct {
		set  bool
		name string
	}{{spec.hasAlg, "algorithm"}, {spec.hasCount, "limit"}, {spec.hasPeriod, "period"}} {
		if !f.set {
			d.add(n, path+"."+f.name, "missing: every rule that is not exempt needs algorithm, limit and period")
		}
	}
	if len(d.err.Problems) > before {
		return r, false
	}
	r.Limit = sluice.Limit{Algorithm: spec.alg, Count: spec.count, Period: spec.period, Burst: spec.burst}
	ok := d.check(r.Limit, &spec, n, path)
	if len(tierOrder) > 0 {
		r.Tiers = make(map[string]sluice.Limit, len(tierOrder))
	}
	for _, name := range tierOrder {
		ts := tierSpecs[name]
		l := r.Limit
		if ts.hasAlg {
			l.Algorithm = ts.alg
		}
		if ts.hasPeriod {
			l.Period = ts.period
		}
		if ts.hasCount {
			// A tier that sets its limit gets a burst of its own limit
			// unless it sets one: the rule's burst was sized for the
			// rule's limit.
			l.Count, l.Burst = ts.count, 0
		}
		if ts.hasBurst {
			l.Burst = ts.burst
		}
		if !l.Algorithm.IsBucket() && !ts.hasBurst {
			l.Burst = 0
		}
		if d.check(l, ts, tierNodes[name], path+".tiers."+name) {
			r.Tiers[name] = l
		} else {
			ok = false
		}
	}
	if !ok {
		return r, false
	}
	if err := r.Validate(); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, httplimit.ErrInvalidRule.Error()+": ")
		at, field := n, ""
		switch {
		case strings.Contains(msg, "max delay") && maxDelayNode != nil:
			at, field = maxDelayNode, ".max_delay"
		case strings.Contains(msg, "max delay"):
			field = ".max_delay"
		case strings.Contains(msg, "action") && actionNode != nil:
			at, field = actionNode, ".action"
		case strings.Contains(msg, "path"):
			field = ".match"
		}
		d.add(at, path+field, "%s", msg)
		return r, false
	}
	return r, true
}

func (d *decoder) match(n *yaml.Node, path string, m *httplimit.Match) {
	d.fields(n, path, []string{"path", "paths", "methods", "hosts"}, func(key string, v *yaml.Node) {
		p := path + "." + key
		ss, ok := d.strings(v, p, true)
		if !ok {
			return
		}
		switch key {
		case "path", "paths":
			for i, s := range ss {
				if !strings.HasPrefix(s, "/") || strings.Contains(s[:len(s)-1], "*") || (strings.HasSuffix(s, "*") && !strings.HasSuffix(s, "/*")) {
					at := resolve(v)
					if at.Kind == yaml.SequenceNode {
						at = at.Content[i]
					}
					d.add(at, p, "path %q must start with / and may end in /* (no other wildcards)", s)
					continue
				}
				m.Paths = append(m.Paths, s)
			}
		case "methods":
			for _, s := range ss {
				m.Methods = append(m.Methods, strings.ToUpper(s))
			}
		case "hosts":
			for i, s := range ss {
				if _, err := netip.ParseAddr(s); err != nil && (s == "" || strings.ContainsAny(strings.TrimPrefix(s, "*."), "*:/ ")) {
					at := resolve(v)
					if at.Kind == yaml.SequenceNode {
						at = at.Content[i]
					}
					d.add(at, p, "host %q must be a host name without port, optionally starting with *.", s)
					continue
				}
				m.Hosts = append(m.Hosts, s)
			}
		}
	})
}
