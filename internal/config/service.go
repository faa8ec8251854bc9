// The service section: the rate-limit service for Envoy (RLS v3 over gRPC,
// and envoyproxy/ratelimit's HTTP API) and its descriptor files.

package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
)

// Service is the service section. The service decides with the store of
// the store section, and reloads with the rest of the file.
type Service struct {
	// GRPC is the listener of the Envoy rate-limit service (RLS v3), with
	// the gRPC health service and server reflection; empty for none.
	GRPC string
	// HTTP is the listener of envoyproxy/ratelimit's HTTP API (POST /json,
	// GET /healthcheck); empty for none.
	HTTP string
	// Descriptors are the files and directories of descriptor
	// configuration, in envoyproxy/ratelimit's format with Sluice's
	// extensions, relative to the config file's directory. At least one.
	Descriptors []string
	// MergeDomains lets one domain be spread over several files, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. Default false.
	MergeDomains bool
	// DecideOnError makes the store section's on_error decide when the
	// store fails (service.on_store_error: on_error); by default the
	// answer is UNAVAILABLE and Envoy's failure_mode_deny decides.
	DecideOnError bool
	// Headers are the headers for the client in response_headers_to_add,
	// by their configuration names: ietf, legacy, retry_after, envoy;
	// empty for none. Default [ietf, retry_after].
	Headers []string
	// EnvoyHeaders are the names of the envoy headers
	// (service.envoy_headers), as envoyproxy/ratelimit's LIMIT_*_HEADER
	// settings give them; DefaultEnvoyHeaders' where the file names none.
	// Set only when Headers has envoy.
	EnvoyHeaders EnvoyHeaders
	// Deny are the lists whose values, in the descriptor entry each names,
	// refuse a request (OVER_LIMIT) before anything is counted
	// (service.deny).
	Deny []EntryList
	// Allow are the lists whose values, in the descriptor entry each
	// names, exempt a descriptor from its limit (service.allow).
	Allow []EntryList
	// Anchor is the descriptor entry key whose value is a client's
	// billing anchor for calendar quotas (service.anchor; see
	// rls.Options.Anchor); empty for none.
	Anchor string

	// Rules is the descriptor tree loaded from Descriptors, with Deny and
	// Allow; Load fills it, Parse leaves it nil.
	Rules *descriptor.Set

	denyNode, allowNode *yaml.Node // resolved once the lists are decoded
}

// EnvoyHeaders name the three headers of service.headers' envoy:
// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER.
type EnvoyHeaders struct {
	Limit, Remaining, Reset string
}

// DefaultEnvoyHeaders are the names service.envoy_headers defaults to,
// envoyproxy/ratelimit's own defaults.
var DefaultEnvoyHeaders = EnvoyHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// EntryList is a list of the lists section applied to the values of one
// descriptor entry key, such as remote_address.
type EntryList struct {
	Entry string
	List  *httplimit.List
}

// serviceFields are the fields of service.
var serviceFields = []string{"grpc", "http", "descriptors", "merge_domains", "on_store_error", "headers", "envoy_headers", "deny", "allow", "anchor"}

// envoyHeaderFields are the fields of service.envoy_headers.
var envoyHeaderFields = []string{"limit", "remaining", "reset"}

func (d *decoder) service(n *yaml.Node, s *Service) {
	s.Headers = []string{"ietf", "retry_after"}
	hasDescriptors := false
	var envoyNode *yaml.Node
	d.fields(n, "service", serviceFields, func(key string, v *yaml.Node) {
		p := "service." + key
		switch key {
		case "grpc", "http":
			a, ok := d.hostPort(v, p, "127.0.0.1:8081")
			if !ok {
				return
			}
			if key == "grpc" {
				s.GRPC = a
			} else {
				s.HTTP = a
			}
		case "descriptors":
			ss, ok := d.strings(v, p, true)
			if !ok {
				return
			}
			hasDescriptors = true
			for i, f := range ss {
				if f == "" {
					d.add(v, fmt.Sprintf("%s[%d]", p, i), "want the path of a file or directory")
					continue
				}
				s.Descriptors = append(s.Descriptors, f)
			}
		case "merge_domains":
			s.MergeDomains, _ = d.boolean(v, p)
		case "anchor":
			if a, ok := d.nonEmpty(v, p, "want the key of a descriptor entry whose value is the billing anchor, such as billing_anchor"); ok {
				s.Anchor = a
			}
		case "deny":
			s.denyNode = v
		case "allow":
			s.allowNode = v
		case "on_store_error":
			if f, ok := d.str(v, p); ok {
				switch f {
				case "unavailable":
					s.DecideOnError = false
				case "on_error":
					s.DecideOnError = true
				default:
					d.add(v, p, "want unavailable (Envoy's failure_mode_deny decides) or on_error (store.on_error decides), got %q", f)
				}
			}
		case "headers":
			ss, ok := d.strings(v, p, false)
			if !ok {
				return
			}
			var hs []string
			none := false
			for i, x := range ss {
				switch x = strings.ToLower(x); x {
				case "ietf", "legacy", "retry_after", "envoy":
					if !slices.Contains(hs, x) {
						hs = append(hs, x)
					}
				case "none":
					none = true
				default:
					d.add(resolve(v).Content[i], fmt.Sprintf("%s[%d]", p, i), "want ietf, legacy, retry_after, envoy or none, got %q", x)
				}
			}
			if none && len(hs) > 0 {
				d.add(v, p, "none cannot be combined with other headers")
			}
			s.Headers = hs
		case "envoy_headers":
			envoyNode = v
			d.envoyHeaders(v, p, &s.EnvoyHeaders)
		}
	})
	if resolve(n).Kind != yaml.MappingNode {
		return
	}
	switch {
	case envoyNode != nil && !slices.Contains(s.Headers, "envoy"):
		d.add(envoyNode, "service.envoy_headers", "names the headers of service.headers' envoy, which is not on: add envoy to service.headers")
	case slices.Contains(s.Headers, "envoy"):
		at := envoyNode
		if at == nil {
			at = n
		}
		d.checkEnvoyHeaders(at, s)
	}
	if !hasDescriptors {
		d.add(n, "service.descriptors", "missing: want the descriptor configuration's file or directory (envoyproxy/ratelimit's format)")
	}
	if s.GRPC == "" && s.HTTP == "" {
		d.add(n, "service", "want grpc, http or both: the listeners of the rate-limit service")
	}
}

// envoyHeaders decodes service.envoy_headers, each a valid header name.
func (d *decoder) envoyHeaders(n *yaml.Node, path string, e *EnvoyHeaders) {
	d.fields(n, path, envoyHeaderFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		name, ok := d.str(v, p)
		if !ok {
			return
		}
		if !httpguts.ValidHeaderFieldName(name) {
			d.add(v, p, "want a header name, such as X-RateLimit-Limit, got %q", name)
			return
		}
		switch key {
		case "limit":
			e.Limit = name
		case "remaining":
			e.Remaining = name
		case "reset":
			e.Reset = name
		}
	})
}

// checkEnvoyHeaders reports an envoy header whose name another header of
// the same answer has: another envoy header, or one of the other choices
// of service.headers that are on.
func (d *decoder) checkEnvoyHeaders(n *yaml.Node, s *Service) {
	taken := map[string]string{}
	for choice, names := range map[string][]string{
		"ietf":        {"RateLimit-Policy", "RateLimit"},
		"retry_after": {"Retry-After"},
		"legacy":      {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"},
	} {
		if slices.Contains(s.Headers, choice) {
			for _, h := range names {
				taken[strings.ToLower(h)] = "a header of service.headers' " + choice
			}
		}
	}
	e := &s.EnvoyHeaders
	for _, f := range []struct {
		key  string
		name *string
		def  string
	}{{"limit", &e.Limit, DefaultEnvoyHeaders.Limit}, {"remaining", &e.Remaining, DefaultEnvoyHeaders.Remaining}, {"reset", &e.Reset, DefaultEnvoyHeaders.Reset}} {
		if *f.name == "" {
			*f.name = f.def
		}
		lower := strings.ToLower(*f.name)
		if other, ok := taken[lower]; ok {
			d.add(n, "service.envoy_headers."+f.key, "%s is already %s", *f.name, other)
		}
		taken[lower] = "the name of service.envoy_headers." + f.key
	}
}

// serviceLists resolves service.deny and service.allow, mappings from a
// descriptor entry key to the names of lists, once the lists section is
// decoded.
func (d *decoder) serviceLists(s *Service) {
	for _, f := range []struct {
		n    *yaml.Node
		name string
		out  *[]EntryList
	}{{s.denyNode, "deny", &s.Deny}, {s.allowNode, "allow", &s.Allow}} {
		if f.n == nil {
			continue
		}
		n := resolve(f.n)
		path := "service." + f.name
		if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
			d.add(n, path, "want a mapping from a descriptor entry key to list names, such as { remote_address: [bad-ips] }, got %s", found(n))
			continue
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, v := resolve(n.Content[i]), n.Content[i+1]
			p := path + "." + kn.Value
			switch {
			case kn.Kind != yaml.ScalarNode || kn.Value == "":
				d.add(kn, path, "want a descriptor entry key, such as remote_address")
				continue
			case seen[kn.Value]:
				d.add(kn, p, "appears twice")
				continue
			}
			seen[kn.Value] = true
			for _, li := range d.namedLists(v, p, false) {
				*f.out = append(*f.out, EntryList{Entry: kn.Value, List: li})
			}
		}
	}
}

// entryValues looks a descriptor entry's values up in a list: as
// addresses in a cidrs list (a value that is not an address is on none),
// as they are in a keys list.
type entryValues struct{ li *httplimit.List }

func (ev entryValues) Contains(v string) bool {
	if ev.li.Addrs != nil {
		a, err := netip.ParseAddr(v)
		return err == nil && ev.li.Addrs.Contains(a)
	}
	return ev.li.Keys != nil && ev.li.Keys.Contains(v)
}

// loadService loads the descriptor files of the service section, relative
// to dir; check, if set, reports the limits the store cannot run.
func loadService(s *Service, dir string, check func(sluice.Limit) error) error {
	paths := make([]string, len(s.Descriptors))
	for i, p := range s.Descriptors {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		paths[i] = p
	}
	set, err := LoadDescriptorsWith(DescriptorOptions{MergeDomains: s.MergeDomains, Check: check}, paths...)
	if err != nil {
		return err
	}
	var ls []descriptor.List
	for _, l := range s.Deny {
		ls = append(ls, descriptor.List{Name: l.List.Name, Key: l.Entry, Deny: true, Values: entryValues{l.List}})
	}
	for _, l := range s.Allow {
		ls = append(ls, descriptor.List{Name: l.List.Name, Key: l.Entry, Values: entryValues{l.List}})
	}
	if len(ls) > 0 {
		if set, err = set.WithLists(ls...); err != nil {
			return fmt.Errorf("config: %w: %w", ErrInvalid, err)
		}
	}
	s.Rules = set
	return nil
}

// Files returns every file the service section's descriptors are
// read from, for a watcher to reload when one changes.
func (s *Service) Files(configPath string) ([]string, error) {
	var out []string
	var errs []error
	for _, p := range s.Descriptors {
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(configPath), p)
		}
		fs, err := DescriptorFiles(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, fs...)
	}
	return out, errors.Join(errs...)
}
