package replay

import (
	"fmt"
	"net/http"
	"unsafe"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
)

// notes says what the replay of cfg could not know from its logs.
func notes(cfg *config.Config, carried func(header string) bool) []string {
	var out []string
	if cfg.Store.Backend == "redis" {
		out = append(out, "the configuration's store is Redis, which shares limits between gateways: replay the logs of every gateway together (several LOG arguments are merged by time)")
	}
	part := func(what string, k httplimit.KeyPart) {
		var header string
		switch k.Source {
		case httplimit.SourceHeader:
			header = k.Name
		case httplimit.SourceCookie:
			header = "Cookie"
		case httplimit.SourceJWT:
			header = "Authorization"
		default:
			return
		}
		if !carried(header) {
			out = append(out, fmt.Sprintf("%s uses %s, but no log line carried the %s header: every request lacked it", what, k, header))
		}
	}
	t := cfg.Limiter.Tiers
	if t.From != (httplimit.KeyPart{}) {
		part("tiers.from", t.From)
	}
	if t.Anchor != (httplimit.KeyPart{}) {
		part("tiers.anchor", t.Anchor)
	}
	for _, r := range cfg.Limiter.Rules {
		for _, k := range r.Key {
			part(fmt.Sprintf("rule %q", r.Name), k)
		}
		if r.Concurrency != nil {
			out = append(out, fmt.Sprintf("rule %q limits concurrent requests: logs record no overlap, so each request holds its slot for no time and the slots never limit (its rate, if any, is replayed)", r.Name))
		}
		if r.Count != nil && r.Count.Header != "" {
			out = append(out, fmt.Sprintf("rule %q counts responses with the header %s, which logs do not record: only its statuses count", r.Name, http.CanonicalHeaderKey(r.Count.Header)))
		}
	}
	return out
}

// sameString reports whether a and b are the same string in memory.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}
