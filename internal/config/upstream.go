package config

import (
	"net/url"
	"time"

	"go.yaml.in/yaml/v3"
)

// Proxy is the upstream section's settings besides its URL: how the
// gateway's reverse proxy talks to the upstream.
type Proxy struct {
	DialTimeout           time.Duration // upstream.dial_timeout, default 5s
	ResponseHeaderTimeout time.Duration // upstream.response_header_timeout, default 60s
	IdleTimeout           time.Duration // upstream.idle_timeout (idle upstream connections), default 90s
	// PreserveHost passes the client's Host to the upstream (upstream.host:
	// preserve, the default); false sends the upstream URL's host
	// (upstream.host: upstream).
	PreserveHost bool
}

// upstreamFields are the fields of upstream in its mapping form.
var upstreamFields = []string{"url", "dial_timeout", "response_header_timeout", "idle_timeout", "host"}

// upstream decodes the upstream key: a URL (or builtin:echo), or a mapping
// of url and the proxy's settings.
func (d *decoder) upstream(n *yaml.Node, c *Config) {
	if r := resolve(n); r.Kind == yaml.ScalarNode && r.Tag != "!!null" {
		d.upstreamURL(r, "upstream", c)
		return
	}
	if r := resolve(n); r.Kind == yaml.ScalarNode {
		d.add(n, "upstream", "want builtin:echo, an http(s) URL, or a mapping with url, got nothing")
		return
	}
	hasURL := false
	d.fields(n, "upstream", upstreamFields, func(key string, v *yaml.Node) {
		p := "upstream." + key
		switch key {
		case "url":
			hasURL = true
			d.upstreamURL(v, p, c)
		case "dial_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Minute); ok {
				c.Proxy.DialTimeout = t
			}
		case "response_header_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Hour); ok {
				c.Proxy.ResponseHeaderTimeout = t
			}
		case "idle_timeout":
			if t, ok := d.duration(v, p, time.Millisecond, time.Hour); ok {
				c.Proxy.IdleTimeout = t
			}
		case "host":
			if s, ok := d.str(v, p); ok {
				switch s {
				case "preserve":
					c.Proxy.PreserveHost = true
				case "upstream":
					c.Proxy.PreserveHost = false
				default:
					d.add(v, p, "want preserve or upstream, got %q", s)
				}
			}
		}
	})
	if !hasURL && resolve(n).Kind == yaml.MappingNode {
		d.add(n, "upstream.url", "missing: want builtin:echo or the URL of the API to protect")
	}
}

func (d *decoder) upstreamURL(v *yaml.Node, p string, c *Config) {
	s, ok := d.str(v, p)
	if !ok {
		return
	}
	c.Upstream = s
	if s != "builtin:echo" {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.add(v, p, "want builtin:echo or an http:// or https:// URL with a host, got %q", s)
		}
	}
}
