// The redis backend: the counters in Redis, shared by every gateway and
// service instance on it.

package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// redisBackend keeps every limit's state in Redis (redisstore), shared by
// every process on it, with a local in-memory fallback for on_error
// local. It runs periods in whole microseconds only.
var redisBackend = Backend{
	Name:       "redis",
	Title:      "Redis",
	Shared:     true,
	Sections:   []Section{redisSection, quotaSection},
	Decode:     decodeRedis,
	Needs:      "a url, or addrs for a cluster or Sentinel",
	Load:       loadRedis,
	CheckLimit: redisstore.CheckLimit,
	Open:       openRedis,
}

// redisSection is store.redis.
var redisSection = Section{Path: "store.redis", Fields: []string{"url", "addrs", "master_set", "username", "password", "db", "timeout", "prefix", "hash_keys", "hash_secret_file", "quota"}}

// quotaSection is store.redis.quota: the quota leases of rules with sync:
// lease (redisstore.Options.LeaseRate, LeaseFraction and LeaseTTL).
var quotaSection = Section{Path: "store.redis.quota", Fields: []string{"lease_rate", "lease_fraction", "lease_ttl"}}

// decodeRedis decodes store.redis into s.Redis (and s.HashSecretFile).
func decodeRedis(d Decoder, n *yaml.Node, s *Settings) {
	r := &s.Redis
	hasAddr := false
	d.Fields(n, redisSection, func(key string, v *yaml.Node) {
		p := "store.redis." + key
		switch key {
		case "url":
			if u, ok := d.String(v, p); ok {
				pu, err := url.Parse(u)
				if err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
					d.Problem(v, p, "want a redis://, rediss:// or unix:// URL")
					return
				}
				r.URL, hasAddr = u, true
			}
		case "addrs":
			if as, ok := d.Strings(v, p); ok {
				for i, a := range as {
					if _, _, err := net.SplitHostPort(a); err != nil {
						d.Problem(d.Resolve(v).Content[i], fmt.Sprintf("%s[%d]", p, i), "want host:port, got %q", a)
					}
				}
				r.Addrs, hasAddr = as, len(as) > 0
			}
		case "master_set":
			r.MasterSet, _ = d.String(v, p)
		case "username":
			r.Username, _ = d.String(v, p)
		case "password":
			r.Password, _ = d.String(v, p)
		case "db":
			if db, ok := d.Integer(v, p, 0, 1<<20); ok {
				r.DB = int(db)
			}
		case "timeout":
			if t, ok := d.Duration(v, p, time.Millisecond, time.Minute); ok {
				r.Timeout = t
			}
		case "prefix":
			if pre, ok := d.String(v, p); ok {
				if pre == "" || len(pre) > 64 || strings.ContainsAny(pre, "{} \t\r\n") {
					d.Problem(v, p, "want 1 to 64 characters without braces or spaces, got %q", pre)
					return
				}
				r.Prefix = pre
			}
		case "hash_keys":
			r.HashKeys, _ = d.Bool(v, p)
		case "hash_secret_file":
			if f, ok := d.String(v, p); ok {
				if f == "" {
					d.Problem(v, p, "want the path of a file holding the secret")
					return
				}
				s.HashSecretFile = f
			}
		case "quota":
			decodeQuota(d, v, r)
		}
	})
	if r := d.Resolve(n); !hasAddr && (r.Kind == yaml.MappingNode || r.Tag == "!!null") {
		d.Problem(n, "store.redis", "want url, or addrs for a cluster or Sentinel")
	}
	if r.URL != "" && len(r.Addrs) > 0 {
		d.Problem(n, "store.redis", "give url or addrs, not both")
	}
}

// decodeQuota decodes store.redis.quota into r's lease options. Each bound
// refuses a value the store would silently replace by its default (0) or
// one that cannot work as meant; see docs/config.md.
func decodeQuota(d Decoder, n *yaml.Node, r *redisstore.Options) {
	d.Fields(n, quotaSection, func(key string, v *yaml.Node) {
		p := "store.redis.quota." + key
		switch key {
		case "lease_rate":
			// Above a million decisions a second on one key in one
			// process, no key would ever lease: a typo, not a choice.
			if m, ok := d.Integer(v, p, 1, 1_000_000); ok {
				r.LeaseRate = int(m)
			}
		case "lease_fraction":
			f, ok := d.Percent(v, p, "the limit such as 5%")
			if ok && f == 0 {
				d.Problem(v, p, "want more than 0%%: a lease of nothing leases nothing")
				return
			}
			if ok {
				r.LeaseFraction = f / 100
			}
		case "lease_ttl":
			// Below 10ms a lease ends within a few round trips to Redis
			// (it is sized for a quarter of its life, and stops 1ms + 1%
			// early); beyond a minute, a crashed gateway's leases would
			// hold back quota for that long.
			if t, ok := d.Duration(v, p, 10*time.Millisecond, time.Minute); ok {
				r.LeaseTTL = t
			}
		}
	})
}

// loadRedis reads store.redis.hash_secret_file, relative to dir, into
// s.Redis.HashSecret.
func loadRedis(s *Settings, dir string) error {
	f := s.HashSecretFile
	if f == "" {
		return nil
	}
	if !filepath.IsAbs(f) {
		f = filepath.Join(dir, f)
	}
	secret, err := readSecret(f)
	if err != nil {
		return fmt.Errorf("store.redis.hash_secret_file: %w", err)
	}
	s.Redis.HashSecret = secret
	return nil
}

// readSecret reads a secret of 16 to 4096 bytes from a file, surrounding
// white space removed.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 4096:
		return nil, fmt.Errorf("%s is larger than 4096 bytes", path)
	case len(b) < 16:
		return nil, fmt.Errorf("the secret in %s is %d bytes; want at least 16 (such as the output of: openssl rand -hex 32)", path, len(b))
	}
	return b, nil
}

// openRedis opens the Redis store of s.Redis, with an in-memory fallback
// of s.MaxKeys entries unless the options bring one. It opens even while
// Redis is unreachable: a gateway starts during a Redis outage and decides
// per on_error until Redis answers, for refusing to start would turn the
// outage of Redis into an outage of every API behind a restarted server.
// Each failure of Redis is counted (env.Failed) and logged, at most once
// a second; each change between deciding with Redis and per on_error is
// logged and told to env.Degraded.
func openRedis(env Env, s Settings) (Opened, error) {
	ro := s.Redis
	local := memstore.New(memstore.Options{MaxKeys: s.MaxKeys, Clock: env.Clock})
	if ro.Fallback == nil {
		ro.Fallback = local
	}
	userHook := ro.OnFailure
	failLog := &loglimit.Limit{Per: 1} // one line a second: a dead Redis fails every decision
	onError := ro.OnError.String()
	ro.OnFailure = func(err error) {
		env.Failed()
		if failLog.Allow(time.Now()) {
			env.Log.LogAttrs(context.Background(), slog.LevelWarn, "Redis failed; deciding per on_error",
				slog.String("on_error", onError), slog.Any("error", err))
		}
		if userHook != nil {
			userHook(err)
		}
	}
	ro.ConnectLater = true
	rs, err := redisstore.New(ro)
	if err != nil {
		local.Close()
		return nil, err
	}
	if rs.Degraded() {
		env.Degraded(time.Now(), true)
		env.Log.LogAttrs(context.Background(), slog.LevelWarn, "Redis unreachable at start; deciding per on_error until it answers",
			slog.String("on_error", onError), slog.Any("error", rs.Ping(context.Background())))
	}
	o := &redisStore{s: rs, local: local, onError: onError, prefix: ro.Prefix, hashKeys: ro.HashKeys}
	env.Go(func(ctx context.Context) {
		watchDegraded(ctx, env.Log, time.Second, rs.Degraded, onError, env.Degraded)
	})
	registerMemstore(env.Registry, local, "the in-memory fallback store (Redis keeps the shared state)")
	env.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_store_degraded",
		Help: "1 while decisions follow on_error without calling Redis: the circuit breaker is open, or Redis has not answered since the start.",
	}, func() float64 {
		if rs.Degraded() {
			return 1
		}
		return 0
	}))
	registerQuota(env.Registry, rs)
	return o, nil
}

// redisStore is the open redis backend.
type redisStore struct {
	s        *redisstore.Store
	local    *memstore.Store // the fallback the server made, closed with s
	onError  string          // store.on_error, for messages
	prefix   string          // store.redis.prefix as given ("" for the default)
	hashKeys bool
}

var (
	_ Shared     = (*redisStore)(nil)
	_ Degradable = (*redisStore)(nil)
	_ KeyHasher  = (*redisStore)(nil)
)

func (r *redisStore) Store() sluice.Store { return r.s }

// Ready reports Redis unreachable, or not yet confirmed back, before
// asking it: after an outage Redis may answer a ping before the store has
// seen it back (within about a second), and decisions until then still
// follow on_error.
func (r *redisStore) Ready(ctx context.Context) error {
	if r.s.Degraded() {
		return fmt.Errorf("deciding per on_error (%s): Redis is unreachable, or its return is not yet confirmed", r.onError)
	}
	return r.s.Ping(ctx)
}

func (r *redisStore) Close() error { return errors.Join(r.s.Close(), r.local.Close()) }

// Overrides keeps the overrides in Redis, under the store's prefix.
func (r *redisStore) Overrides() (func() rueidis.Client, string) { return r.s.Client, r.prefix }

func (r *redisStore) Degraded() bool { return r.s.Degraded() }

func (r *redisStore) HashesKeys() bool { return r.hashKeys }

func (r *redisStore) KeyDigest(key string) string { return r.s.KeyDigest(key) }

// watchDegraded logs each change of degraded() (checked every second),
// until ctx is done: WARN when decisions start following on_error, INFO
// when the store answers again.
//
// onChange, if not nil, is told of each change too.
func watchDegraded(ctx context.Context, log *slog.Logger, every time.Duration, degraded func() bool, onError string, onChange func(time.Time, bool)) {
	was := degraded()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := degraded()
		switch {
		case now == was:
		case now:
			log.LogAttrs(ctx, slog.LevelWarn, "Redis unavailable; deciding per on_error until it recovers", slog.String("on_error", onError))
		default:
			log.LogAttrs(ctx, slog.LevelInfo, "Redis recovered; decisions use Redis again")
		}
		if now != was && onChange != nil {
			onChange(time.Now(), now)
		}
		was = now
	}
}

// registerQuota registers the metrics of the Redis store's quota leases
// and async counts (rules with sync: lease or async).
func registerQuota(reg prometheus.Registerer, s *redisstore.Store) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_quota_leased_unused",
			Help: "Units this gateway holds in live quota leases (sync: lease) and has not spent: what other gateways' clients may be refused while they are held.",
		}, func() float64 { return float64(s.QuotaStats().LeasedUnused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_quota_local_decisions_total",
			Help: "Decisions of sync: lease and async rules made without calling Redis.",
		}, func() float64 { return float64(s.QuotaStats().Local) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_quota_redis_calls_total",
			Help: "Calls to Redis for sync: lease and async rules (leases, returns, syncs and the decisions of keys not hot), failed ones included.",
		}, func() float64 { return float64(s.QuotaStats().Calls) }),
	)
}
