package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/redisstore"
)

// Store is the store section.
type Store struct {
	Backend string // "memory" (default) or "redis"
	MaxKeys int    // default 1,000,000
	Redis   redisstore.Options
	// HashSecretFile holds the key of Redis.HashKeys' digests
	// (store.redis.hash_secret_file), relative to the config file;
	// ParseFile reads it into Redis.HashSecret.
	HashSecretFile string
}

// storeFields are the fields of store.
var storeFields = []string{"backend", "max_keys", "redis", "on_error"}

// redisFields are the fields of store.redis.
var redisFields = []string{"url", "addrs", "master_set", "username", "password", "db", "timeout", "prefix", "hash_keys", "hash_secret_file", "quota"}

// quotaFields are the fields of store.redis.quota: the quota leases of
// rules with sync: lease (redisstore.Options.LeaseRate, LeaseFraction and
// LeaseTTL).
var quotaFields = []string{"lease_rate", "lease_fraction", "lease_ttl"}

// store decodes the store section and returns its redis node, if any.
func (d *decoder) store(n *yaml.Node, s *Store) *yaml.Node {
	var redisNode *yaml.Node
	d.fields(n, "store", storeFields, func(key string, v *yaml.Node) {
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
			d.redis(v, &s.Redis, &s.HashSecretFile)
		}
	})
	return redisNode
}

func (d *decoder) redis(n *yaml.Node, r *redisstore.Options, secretFile *string) {
	hasAddr := false
	d.fields(n, "store.redis", redisFields, func(key string, v *yaml.Node) {
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
		case "hash_keys":
			r.HashKeys, _ = d.boolean(v, p)
		case "hash_secret_file":
			if f, ok := d.str(v, p); ok {
				if f == "" {
					d.add(v, p, "want the path of a file holding the secret")
					return
				}
				*secretFile = f
			}
		case "quota":
			d.quota(v, r)
		}
	})
	if !hasAddr && resolve(n).Kind == yaml.MappingNode {
		d.add(n, "store.redis", "want url, or addrs for a cluster or Sentinel")
	}
	if r.URL != "" && len(r.Addrs) > 0 {
		d.add(n, "store.redis", "give url or addrs, not both")
	}
}

// quota decodes store.redis.quota into r's lease options. Each bound
// refuses a value the store would silently replace by its default (0) or
// one that cannot work as meant; see docs/config.md.
func (d *decoder) quota(n *yaml.Node, r *redisstore.Options) {
	d.fields(n, "store.redis.quota", quotaFields, func(key string, v *yaml.Node) {
		p := "store.redis.quota." + key
		switch key {
		case "lease_rate":
			// Above a million decisions a second on one key in one
			// process, no key would ever lease: a typo, not a choice.
			if m, ok := d.integer(v, p, 1, 1_000_000); ok {
				r.LeaseRate = int(m)
			}
		case "lease_fraction":
			vn := resolve(v)
			if vn.Kind != yaml.ScalarNode || vn.Tag == "!!null" {
				d.add(v, p, "want a percentage of the limit such as 5%%, got %s", found(v))
				return
			}
			f, err := ParsePercent(vn.Value)
			if err == nil && f == 0 {
				err = fmt.Errorf("want more than 0%%: a lease of nothing leases nothing")
			}
			if err != nil {
				d.add(v, p, "%s", strings.TrimPrefix(err.Error(), ErrPercent.Error()+": "))
				return
			}
			r.LeaseFraction = f / 100
		case "lease_ttl":
			// Below 10ms a lease ends within a few round trips to Redis
			// (it is sized for a quarter of its life, and stops 1ms + 1%
			// early); beyond a minute, a crashed gateway's leases would
			// hold back quota for that long.
			if t, ok := d.duration(v, p, 10*time.Millisecond, time.Minute); ok {
				r.LeaseTTL = t
			}
		}
	})
}
