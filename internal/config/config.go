// Package config reads the sluice gateway's config file (YAML; every field
// is documented in docs/config.md, which a test holds to the decoder's
// field lists; examples/quickstart.yaml is a complete file) into the options of packages httplimit,
// clientip and redisstore. Every problem is reported at once, each with the
// field's path and its line and column.
package config

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server/backend"
)

// MaxSize is the largest config file accepted, in bytes.
const MaxSize = 1 << 20

// Config is a validated config file.
type Config struct {
	Server   Server
	Upstream string // "builtin:echo" or an http(s) URL (upstream, or upstream.url)
	// Proxy holds the rest of the upstream mapping: the reverse proxy's
	// timeouts and Host header.
	Proxy Proxy
	Store Store
	// ClientIP configures how the "ip" key part finds the client.
	ClientIP clientip.Options
	// Limiter holds the rules, tiers, headers and over-limit header;
	// Store, ClientIP and Observer are left for the gateway to fill.
	Limiter httplimit.Options
	// RejectionLogsPerSecond bounds the WARN lines for rejections
	// (log.rejections_per_second, default 10).
	RejectionLogsPerSecond int64
	// AccessLog is log.access; nil when the file has none (the access log
	// is off).
	AccessLog *AccessLog
	// Tracing is the tracing section; nil when the file has none (no
	// traces).
	Tracing *Tracing
	// Admin configures the admin API.
	Admin Admin
	// Service is the rate-limit service for Envoy; nil when the file has
	// no service section.
	Service *Service
	// JWT verifies the bearer tokens of the jwt:CLAIM key parts
	// (identity.jwt); nil when the file has none.
	JWT *JWT
	// listFiles are the lists whose entries ParseFile reads from files.
	listFiles []listFile
}

// LimiterOptions returns the options of the gateway's limiter: Limiter
// with ClientIP built from the client_ip section. Store, Observer,
// Overrides and Identity are left for the caller to fill.
func (c *Config) LimiterOptions() (httplimit.Options, error) {
	ip, err := clientip.New(c.ClientIP)
	if err != nil {
		return httplimit.Options{}, fmt.Errorf("client_ip: %w", err)
	}
	lo := c.Limiter
	lo.ClientIP = ip
	return lo, nil
}

// Gateway reports whether the file runs the gateway listener: it does
// when it names an upstream.
func (c *Config) Gateway() bool { return c.Upstream != "" }

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
	return ParseFile(data, path)
}

// ParseFile is Parse followed by the reading of the files the config
// names: those of the store's options (the backend's Load: the secret of
// store.redis.hash_secret_file), the lists' files, identity.jwt's key
// files and the service section's descriptor files, relative to the
// directory of path, the config file's own path. Their problems are
// reported with their own file names and lines.
func ParseFile(data []byte, path string) (*Config, error) {
	c, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	b, _ := backend.Lookup(c.Store.Backend) // Parse checked it
	if b.Load != nil {
		if err := b.Load(&c.Store.Settings, filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if a := c.AccessLog; a != nil && a.Output != "stdout" {
		a.Output = relative(path, a.Output)
	}
	if err := loadLists(c, path); err != nil {
		return nil, err
	}
	if err := loadJWTKeys(c, path); err != nil {
		return nil, err
	}
	if c.Service != nil {
		if err := loadService(c.Service, filepath.Dir(path), b.CheckLimit); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Parse validates data, the contents of the file called name. It reads no
// other file: see ParseFile (until then, lists kept in files are empty).
func Parse(data []byte, name string) (*Config, error) {
	d := &decoder{err: &Error{File: name}}
	root, ok := d.document(data, "", "the file is empty; see examples/quickstart.yaml")
	if !ok {
		return nil, d.err
	}
	c := d.config(root)
	if len(d.err.Problems) > 0 {
		return nil, d.err
	}
	return c, nil
}

// rootFields are the top-level fields of a config file.
var rootFields = []string{"server", "upstream", "service", "store", "client_ip", "headers", "tiers", "priority", "rules", "log", "admin", "lists", "deny", "identity", "tracing"}

// logFields are the fields of log.
var logFields = []string{"rejections_per_second", "access"}

// accessFields are the fields of log.access.
var accessFields = []string{"output", "lines_per_second", "max_size", "max_backups", "keys"}

// AccessLog is log.access: one JSON line per decision.
type AccessLog struct {
	// Output is "stdout" or a file's path (relative to the config file's
	// directory). Required.
	Output string
	// LinesPerSecond bounds the lines written. Default 1000.
	LinesPerSecond int64
	// MaxSize rotates the file past this many bytes; 0 only on SIGHUP.
	MaxSize int64
	// MaxBackups is how many rotated files are kept. Default 5.
	MaxBackups int
	// RawKeys logs keys as they are (keys: raw); by default, hashed.
	RawKeys bool
}

func (d *decoder) accessLog(n *yaml.Node) *AccessLog {
	a := &AccessLog{LinesPerSecond: 1000, MaxBackups: 5}
	seen := false
	d.fields(n, "log.access", accessFields, func(k string, v *yaml.Node) {
		p := "log.access." + k
		switch k {
		case "output":
			if s, ok := d.nonEmpty(v, p, "want stdout or the path of a file"); ok {
				a.Output, seen = s, true
			}
		case "lines_per_second":
			if x, ok := d.integer(v, p, 1, 1_000_000); ok {
				a.LinesPerSecond = x
			}
		case "max_size":
			if x, ok := d.integer(v, p, 0, 1<<40); ok {
				if x > 0 && x < 4096 {
					d.add(v, p, "want 0 (rotate only on SIGHUP) or at least 4096 bytes")
					return
				}
				a.MaxSize = x
			}
		case "max_backups":
			if x, ok := d.integer(v, p, 1, 1000); ok {
				a.MaxBackups = int(x)
			}
		case "keys":
			if s, ok := d.str(v, p); ok {
				switch s {
				case "hash":
				case "raw":
					a.RawKeys = true
				default:
					d.add(v, p, "%q: want hash or raw", s)
				}
			}
		}
	})
	if !seen {
		d.add(n, "log.access.output", "want stdout or the path of a file: the access log needs an output")
	}
	return a
}

func (d *decoder) config(root *yaml.Node) *Config {
	c := &Config{
		Server: Server{Listen: "127.0.0.1:8080", Admin: "127.0.0.1:9090", ShutdownTimeout: 10 * time.Second,
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10},
		Proxy:                  Proxy{DialTimeout: 5 * time.Second, ResponseHeaderTimeout: 60 * time.Second, IdleTimeout: 90 * time.Second, PreserveHost: true},
		Store:                  Store{Backend: backend.Default, Settings: backend.Settings{MaxKeys: 1_000_000}},
		RejectionLogsPerSecond: 10,
	}
	c.Limiter.Headers = httplimit.HeadersIETF | httplimit.HeadersLegacy
	c.Limiter.Tiers.Default = "free"
	if resolve(root).Kind != yaml.MappingNode {
		d.add(root, "", "want a mapping with server, upstream, store, client_ip, headers, tiers and rules, got %s; see examples/quickstart.yaml", found(root))
		return c
	}
	var storeSections []storeSection
	var storeNode, rulesNode, tiersNode, adminNode, listsNode, denyNode, priorityNode *yaml.Node
	hasUpstream := false
	d.fields(root, "", rootFields, func(key string, v *yaml.Node) {
		switch key {
		case "server":
			d.server(v, &c.Server, &c.Limiter)
		case "upstream":
			hasUpstream = true
			d.upstream(v, c)
		case "store":
			storeNode = v
			storeSections = d.store(v, &c.Store)
		case "client_ip":
			d.clientIP(v, &c.ClientIP)
		case "headers":
			c.Limiter.Headers = d.headers(v)
		case "tiers":
			tiersNode = v
			d.tiers(v, &c.Limiter.Tiers)
		case "rules":
			rulesNode = v
		case "priority":
			priorityNode = v
		case "lists":
			listsNode = v
		case "deny":
			denyNode = v
		case "admin":
			adminNode = v
			d.admin(v, &c.Admin)
		case "identity":
			d.identity(v, c)
		case "tracing":
			c.Tracing = d.tracing(v)
		case "service":
			c.Service = &Service{}
			d.service(v, c.Service)
		case "log":
			d.fields(v, key, logFields, func(k string, v *yaml.Node) {
				if k == "access" {
					c.AccessLog = d.accessLog(v)
					return
				}
				if n, ok := d.integer(v, "log."+k, 0, 1_000_000); ok {
					c.RejectionLogsPerSecond = n
					if n == 0 {
						c.RejectionLogsPerSecond = -1 // none
					}
				}
			})
		}
	})
	if priorityNode != nil {
		d.priority(priorityNode, &c.Limiter.Priority, c.Limiter.Tiers)
	}
	d.lists(listsNode, c)
	if c.Service != nil {
		d.serviceLists(c.Service)
	}
	if denyNode != nil {
		c.Limiter.Deny = d.listNames(denyNode, "deny")
	}
	d.checkAdmin(adminNode, c)
	if hasUpstream && c.Server.Admin != "" && sameAddress(c.Server.Listen, c.Server.Admin) {
		// Point at admin, or at listen if admin is the default.
		if at := lookup(root, "server", "admin"); at != nil {
			d.add(at, "server.admin", "%s takes the port of server.listen (%s): give the admin listener a port of its own, or off", c.Server.Admin, c.Server.Listen)
		} else {
			d.add(lookup(root, "server", "listen"), "server.listen", "%s takes the port of server.admin (%s, the default): give server.admin a port of its own, or off", c.Server.Listen, c.Server.Admin)
		}
	}
	d.checkListeners(root, c, hasUpstream)
	usesRules := hasUpstream || c.Server.ForwardAuth != nil
	if !usesRules && c.Service == nil {
		d.add(root, "upstream", "missing: want upstream (the gateway: builtin:echo or the URL of the API to protect), service (the rate-limit service for Envoy) or server.forward_auth; see examples/")
	}
	chosen, _ := backend.Lookup(c.Store.Backend) // d.store checked it
	d.checkBackend(storeNode, chosen, storeSections)
	if denyNode != nil && !usesRules {
		d.add(denyNode, "deny", "only the gateway (upstream) and forward-auth (server.forward_auth) apply deny lists, and the file enables neither (the rate-limit service takes service.deny)")
	}
	switch {
	case rulesNode == nil && usesRules:
		d.add(root, "rules", "missing: want at least one rule")
	case rulesNode != nil && !usesRules:
		d.add(rulesNode, "rules", "only the gateway (upstream) and forward-auth (server.forward_auth) apply rules, and the file enables neither")
	case rulesNode != nil:
		before := len(d.err.Problems)
		c.Limiter.Rules = d.rules(rulesNode, c.Limiter.Tiers)
		if chosen.CheckLimit != nil && len(d.err.Problems) == before {
			d.checkStoreRules(rulesNode, c.Limiter.Rules, chosen.CheckLimit)
		}
		if c.Server.ForwardAuth != nil && len(d.err.Problems) == before {
			d.checkCountForwardAuth(rulesNode, c.Limiter.Rules)
		}
		if len(d.err.Problems) == before {
			d.checkAdaptive(rulesNode, priorityNode, c, chosen)
		}
	}
	if c.JWT != nil && !usesRules {
		d.add(lookup(root, "identity"), "identity", "only the gateway (upstream) and forward-auth (server.forward_auth) apply rules, and the file enables neither")
	}
	d.checkJWTParts(root, c)
	_ = tiersNode
	return c
}

// relative returns file, relative to the directory of the config file at
// configPath unless it is absolute.
func relative(configPath, file string) string {
	if filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(filepath.Dir(configPath), file)
}

// checkStoreRules reports the limits of rules, all valid, that the store
// cannot run (check, a backend's CheckLimit), at their periods: rules run
// on the store exactly as checked, never by failing open at request time.
func (d *decoder) checkStoreRules(rulesNode *yaml.Node, rules []httplimit.Rule, check func(sluice.Limit) error) {
	d.storeCheck = check
	defer func() { d.storeCheck = nil }()
	nodes := resolve(rulesNode).Content
	for i, r := range rules {
		if r.Action == httplimit.Exempt || i >= len(nodes) || r.Limit == (sluice.Limit{}) {
			// Exempt, or a concurrency rule without a rate: no limit
			// for the store to run.
			continue
		}
		path := fmt.Sprintf("rules[%d]", i)
		d.checkStore(r.Limit, lookup(nodes[i], "period"), path+".period")
		for _, t := range sortedTiers(r.Tiers) {
			at, p := lookup(nodes[i], "tiers", t, "period"), path+".tiers."+t+".period"
			if at == nil {
				at, p = lookup(nodes[i], "period"), path+".period"
			}
			d.checkStore(r.Tiers[t], at, p)
		}
	}
}

func sortedTiers(m map[string]sluice.Limit) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkListeners reports two enabled listeners on one address (the gateway
// and admin listeners have their own messages, above).
func (d *decoder) checkListeners(root *yaml.Node, c *Config, gateway bool) {
	type listener struct{ path, addr string }
	var ls []listener
	if gateway {
		ls = append(ls, listener{"server.listen", c.Server.Listen})
	}
	if c.Server.Admin != "" {
		ls = append(ls, listener{"server.admin", c.Server.Admin})
	}
	if fa := c.Server.ForwardAuth; fa != nil && fa.Listen != "" {
		ls = append(ls, listener{"server.forward_auth.listen", fa.Listen})
	}
	if s := c.Service; s != nil {
		if s.GRPC != "" {
			ls = append(ls, listener{"service.grpc", s.GRPC})
		}
		if s.HTTP != "" {
			ls = append(ls, listener{"service.http", s.HTTP})
		}
	}
	for i, a := range ls {
		for _, b := range ls[:i] {
			if a.path == "server.admin" && b.path == "server.listen" {
				continue
			}
			if sameAddress(a.addr, b.addr) {
				d.add(lookup(root, strings.Split(a.path, ".")...), a.path, "%s takes the port of %s (%s): give each listener a port of its own", a.addr, b.path, b.addr)
			}
		}
	}
}

// sameAddress reports whether two listeners at host:port addresses a and b
// would collide: the same port (not 0, which picks a free one) on hosts
// that are equal, or where either is a wildcard (empty, 0.0.0.0 or ::),
// which takes the port on every address. localhost counts as both loopback
// addresses. Other host names are compared as written, without resolving
// them.
func sameAddress(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa == "0" || !samePort(pa, pb) {
		return false
	}
	ia, ib := hostAddrs(ha), hostAddrs(hb)
	if ia == nil || ib == nil {
		return strings.EqualFold(ha, hb)
	}
	for _, x := range ia {
		for _, y := range ib {
			if x == y || x.IsUnspecified() || y.IsUnspecified() {
				return true
			}
		}
	}
	return false
}

func samePort(a, b string) bool {
	if a == b {
		return true
	}
	na, errA := net.LookupPort("tcp", a)
	nb, errB := net.LookupPort("tcp", b)
	return errA == nil && errB == nil && na == nb
}

// hostAddrs returns the addresses a listener on host binds, or nil for a
// host name other than localhost.
func hostAddrs(host string) []netip.Addr {
	switch strings.ToLower(host) {
	case "":
		return []netip.Addr{netip.IPv6Unspecified()}
	case "localhost":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	return []netip.Addr{a.Unmap().WithZone("")}
}
