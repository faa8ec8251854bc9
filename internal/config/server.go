package config

import (
	"net/netip"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
)

// Server is the server section.
type Server struct {
	Listen            string        // default 127.0.0.1:8080
	Admin             string        // default 127.0.0.1:9090; "off" disables
	ShutdownTimeout   time.Duration // default 10s
	ShutdownDelay     time.Duration // serving on after /readyz turned 503; default 0
	ReadHeaderTimeout time.Duration // default 10s
	ReadTimeout       time.Duration // a whole request, body included; default 60s
	IdleTimeout       time.Duration // a keep-alive connection between requests; default 2m
	MaxHeaderBytes    int           // default 64 KiB
	// ForwardAuth is the forward-auth endpoint (server.forward_auth) for
	// proxies that keep their own proxying; nil when the file has none.
	ForwardAuth *ForwardAuth
}

// ForwardAuth is the server.forward_auth section: the listener of the
// endpoint that Traefik's ForwardAuth, Caddy's forward_auth and nginx's
// auth_request call (package forwardauth), and the proxies it believes.
type ForwardAuth struct {
	Listen         string         // required, host:port
	TrustedProxies []netip.Prefix // required: the proxies allowed to call it
}

// forwardAuthFields are the fields of server.forward_auth.
var forwardAuthFields = []string{"listen", "trusted_proxies"}

// serverFields are the fields of server.
var serverFields = []string{"listen", "admin", "shutdown_timeout", "shutdown_delay", "read_header_timeout", "read_timeout", "idle_timeout", "max_header_bytes", "over_limit_header", "path_case", "forward_auth"}

func (d *decoder) server(n *yaml.Node, s *Server, lo *httplimit.Options) {
	d.fields(n, "server", serverFields, func(key string, v *yaml.Node) {
		p := "server." + key
		switch key {
		case "listen", "admin":
			if r := resolve(v); key == "admin" && r.Kind == yaml.ScalarNode && r.Tag != "!!null" && (r.Value == "off" || r.Value == "") {
				s.Admin = ""
				return
			}
			example := "127.0.0.1:8080"
			if key == "admin" {
				example = "127.0.0.1:9090"
			}
			a, ok := d.hostPort(v, p, example)
			if !ok {
				return
			}
			if key == "listen" {
				s.Listen = a
			} else {
				s.Admin = a
			}
		case "shutdown_timeout":
			// 0 would cut every request in flight off at once: refused,
			// where the server would have read it as the default.
			if t, ok := d.duration(v, p, time.Millisecond, time.Hour); ok {
				s.ShutdownTimeout = t
			}
		case "shutdown_delay":
			if t, ok := d.duration(v, p, 0, time.Hour); ok {
				s.ShutdownDelay = t
			}
		case "read_header_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Hour); ok {
				s.ReadHeaderTimeout = t
			}
		case "read_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, 24*time.Hour); ok {
				s.ReadTimeout = t
			}
		case "idle_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, 24*time.Hour); ok {
				s.IdleTimeout = t
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
		case "forward_auth":
			s.ForwardAuth = d.forwardAuth(v, p)
		case "path_case":
			// One setting for every rule: it describes how the upstream
			// routes paths, which is the same whichever rule looks.
			if c, ok := d.str(v, p); ok {
				switch c {
				case "insensitive":
					lo.CaseSensitivePaths = false
				case "sensitive":
					lo.CaseSensitivePaths = true
				default:
					d.add(v, p, "want insensitive or sensitive, got %q", c)
				}
			}
		}
	})
}

func (d *decoder) forwardAuth(n *yaml.Node, path string) *ForwardAuth {
	fa := &ForwardAuth{}
	d.fields(n, path, forwardAuthFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "listen":
			if a, ok := d.hostPort(v, p, "127.0.0.1:8083"); ok {
				fa.Listen = a
			}
		case "trusted_proxies":
			pp, ok := d.prefixes(v, p)
			fa.TrustedProxies = append(fa.TrustedProxies, pp...)
			if ok && len(pp) == 0 {
				d.add(v, p, "empty: list the addresses of the proxies that call the endpoint")
			}
		}
	})
	if resolve(n).Kind == yaml.MappingNode {
		if !d.hasKey(n, "listen") {
			d.add(n, path+".listen", "missing: want the endpoint's host:port, such as 127.0.0.1:8083")
		}
		if !d.hasKey(n, "trusted_proxies") {
			d.add(n, path+".trusted_proxies", "missing: list the addresses of the proxies that call the endpoint")
		}
	}
	return fa
}

// hasKey reports whether mapping n has key.
func (d *decoder) hasKey(n *yaml.Node, key string) bool {
	n = resolve(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}
