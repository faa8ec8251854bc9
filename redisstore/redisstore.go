// Package redisstore is Sluice's Redis store: any number of processes share
// one limit, decided as exactly as by one process.
//
// Every decision is one call of one server-side Lua script (plain.lua, or
// sluice.lua for rules that need big-number arithmetic; both embedded) that
// evaluates and charges every limit of a policy atomically: one network
// round trip, no read-modify-write race. The script runs the
// same exact integer arithmetic as package algo, in microseconds, and is
// held to it by the conformance suite in package storetest. Scripts are sent
// by SHA and re-sent transparently when Redis answers NOSCRIPT (after a
// restart or failover).
//
// Store.TakeAll decides a batch of requests under several policies and keys
// (the rules an HTTP request matches) in one script call too: charged
// whole or not at all, on a single server or a Sentinel-managed master. On
// a Redis Cluster the keys of different requests lie in different slots,
// which no script may span; there it checks every request before it charges
// them, in two round trips.
//
// A policy with a penalty (sluice.Penalty) is decided by penalty.lua, which
// wraps the decision's script: the key's penalty record lives in a key of
// the same hash slot (the state keys' name with the suffix ":p"), and a
// block, or the strike a denial adds, is read and written in the
// decision's call. A blocked key is then answered from the local cache of
// denials until its block ends; its other denials are never cached, so
// that every strike reaches Redis. Such policies are not coalesced, and a
// batch that holds one is decided request by request (see TakeAll).
//
// Takes and batches that arrive while the store's calls to Redis are busy
// share the next call (Options.Coalesce): one script call then decides each
// of them on its own, in order, atomically, exactly as separate calls would,
// and Redis spends about a quarter less CPU per decision. A lone caller's
// take goes at once and alone.
//
// # Hot keys: quota leases and async counts
//
// A policy in sluice.SyncLease mode (sluice.Policy.WithSync) has its hot
// keys decided locally from quota leases taken from Redis, never exceeding
// its limits; one in sluice.SyncAsync mode is decided locally and its
// counts sent every interval, within a stated bound. Both run quota.lua;
// see quota.go for the rules and docs/hot-keys.md for
// the bounds. Store.QuotaStats reports the units held and the calls made.
//
// # Time
//
// By default the script reads the Redis server's clock (TIME), so processes
// with skewed clocks still agree. Options.Clock makes the store pass the
// caller's time instead; tests use it to decide at exact times.
//
// # Keys
//
// The state of limit i of policy P for key K lives at
//
//	<prefix>:{<length of P>:<P>:<K>}:<i>
//
// (and, for sliding_log, its entries in a sorted set at the same key with
// ":m" appended): key names hold the limit's identity, its policy's name and
// its index, not its definition. The length makes the pair unambiguous
// whatever either contains. The braces are a Redis Cluster hash tag: every
// key of one limited entity lands in one slot, so multi-limit decisions
// never fail with CROSSSLOT. With Options.HashKeys, <K> is a 22-character
// digest of the client key instead (keyed by Options.HashSecret), so that
// Redis holds no raw IP address or API key; every process on one Redis must
// then use the same setting and secret.
//
// The state key's value starts with the definition that wrote it,
// "<algorithm code>:<count>:<period in µs>:<burst>;", followed by the state
// (three doubles, or a log's total and sequence number). A decision that
// finds a state written under another definition carries it to the current
// one first, as package algo does, then decides (see sluice.Policy): a
// reload that changes nothing resets nobody, raising a limit lets a denied
// client through at once, lowering it makes clients over the new limit wait
// for it to free room. Peek carries without writing; Reset removes the state
// whatever its definition. Carrying runs in the script, built only when a
// decision needs it, so it costs the usual decision nothing but comparing
// the definition. Keys written by versions before this layout (whose names
// held the definition) are not read: such a limit starts afresh once, and
// the old keys expire by their TTL.
//
// Every key carries a TTL of exactly the time until its state is back to
// fresh, rounded up to the millisecond (a carried state's follows the new
// rule), and sliding_log sets never hold more entries than the limit (or
// than the higher limit they were carried from, until those entries age
// out).
//
// # Failures
//
// A decision waits at most Options.Timeout for Redis. A decision that times
// out may still be charged: its command was sent, and a slow Redis runs it
// late. The timeout bounds the caller's wait, not what Redis does; a
// request is never charged more than once. When Redis fails (down,
// slow, partitioned) the store answers per Options.OnError: Local (the
// default) decides with an in-memory store holding the same limits, Allow
// admits, Deny rejects. With Local, neither switch admits anything twice
// (see fallback.go): the fallback starts from what the store knows of a
// key (every request Redis admitted, in exact mode; Redis's count at the
// key's last call, in lease and async mode), and every request the
// fallback admits is charged to Redis when it returns, before the key's
// next decision there and, for every key, from the first call that
// succeeds (docs/stores.md, "When Redis comes back", states the bound). A
// circuit breaker stops calling a Redis that keeps failing
// (Options.BreakerThreshold failures in a row) and, while open, probes it
// with a PING about every second (Options.BreakerCooldown, jittered), in
// the background, however long the outage lasts: decisions go back to
// Redis within about a second of its return. Every Decision from a
// fallback path has Degraded set; Store.Degraded reports the state, and
// Options.OnStateChange hears when the store enters and leaves degraded
// operation.
//
// Keys that Redis has just denied are remembered locally until their retry
// time (see Options.DenyCache), so that a client hammering past its limit
// costs Redis nothing; the cache only ever denies what Redis itself would.
//
// A Store is safe for concurrent use.
package redisstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/luascript"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storekit"
)

// The scripts, each loaded by SHA once per process: sluice.lua runs every
// rule, with big-number arithmetic where a rule needs it; plain.lua makes the
// same decisions for policies whose rules all stay below 2^52, about twice as
// fast, because it creates no tables on its path and only a few small
// closures (Redis runs a script's whole chunk, every local function in it
// included, on every call). penalty.lua wraps either for policies with a
// penalty.
var (
	wideLua         = script("sluice.lua", "")
	plainLua        = script("plain.lua", "")
	penaltyWideLua  = script("penalty.lua", wideLua)
	penaltyPlainLua = script("penalty.lua", plainLua)

	wideScript         = rueidis.NewLuaScript(wideLua)
	plainScript        = rueidis.NewLuaScript(plainLua)
	penaltyPlainScript = rueidis.NewLuaScript(penaltyPlainLua)
	penaltyWideScript  = rueidis.NewLuaScript(penaltyWideLua)
)

// luaSources are the scripts and the pieces they share, each routine
// written once:
//
//   - clock.lua: the call's time (the caller's or the server's TIME) and
//     the TTLs of keys;
//   - arith.lua: exact arithmetic on plain numbers (divmod, divCeil,
//     window starts, a bucket's debt);
//   - bignum.lua: the same on big numbers, for rules past 2^52;
//   - bucket.lua: storing a bucket's debt, for refunds and leases;
//   - carry.lua: carrying a state written under another definition.
//
// Lua 5.1 allows a function 200 locals and a closure 60 upvalues, and each
// local function is a closure built on every call: a script takes only
// the pieces it needs, and may take one inside a branch, where it costs
// the other paths nothing.
//
//go:embed *.lua
var luaSources embed.FS

// script returns the script in the file name, assembled by
// luascript.Assemble: its pieces, and for a wrapper (penalty.lua,
// leasetake.lua) decide, the script it wraps, put in at their markers. The
// sources are embedded, so a marker it cannot resolve is a fault of this
// package: it panics, when the package is initialized, which every test
// catches.
func script(name, decide string) string {
	s, err := luascript.Assemble(luaSources, name, decide)
	if err != nil {
		panic("redisstore: " + err.Error())
	}
	return s
}

// Failure is what the store does when Redis cannot decide.
type Failure uint8

const (
	// Local decides with an in-memory store holding the same limits, so
	// each process still enforces them on its own traffic. The default.
	Local Failure = iota
	// Allow admits every request: fail open.
	Allow
	// Deny rejects every request: fail closed.
	Deny
)

// String returns the configuration name: "local", "allow" or "deny".
func (f Failure) String() string {
	switch f {
	case Local:
		return "local"
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Failure(%d)", uint8(f))
}

// ParseFailure returns the Failure named "local", "allow" or "deny".
func ParseFailure(s string) (Failure, error) {
	for _, f := range []Failure{Local, Allow, Deny} {
		if f.String() == s {
			return f, nil
		}
	}
	return 0, fmt.Errorf("redisstore: unknown on_error %q: want local, allow or deny", s)
}

// Errors. Match them with errors.Is.
var (
	// ErrUnsupportedLimit reports a limit the Redis store cannot run: one
	// whose period is not a whole number of microseconds.
	ErrUnsupportedLimit = errors.New("redisstore: unsupported limit")
	// ErrCircuitOpen is reported to Options.OnFailure for decisions that
	// took the fallback path because the breaker was open.
	ErrCircuitOpen = errors.New("redisstore: circuit breaker open")
	// ErrNotConnected reports a decision made while a store built with
	// Options.ConnectLater has not yet reached Redis.
	ErrNotConnected = errors.New("redisstore: not connected to Redis yet")
)

// CheckLimit reports whether the Redis store can run l, for configuration
// loaders that must refuse, before serving, a limit that every decision
// would fail on: it returns l's error from sluice.Limit.Validate (wrapping
// sluice.ErrInvalidLimit), or an error wrapping ErrUnsupportedLimit for a
// valid limit the store cannot run (a period that is not a whole number of
// microseconds), or nil. The store's methods refuse such a limit with the
// same error, naming the policy and the limit's index.
func CheckLimit(l sluice.Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	return checkPeriod(l.Period)
}

func checkPeriod(period time.Duration) error {
	if period%time.Microsecond != 0 {
		return fmt.Errorf("%w: period %v is not a whole number of microseconds (Redis keeps time in microseconds)", ErrUnsupportedLimit, period)
	}
	return nil
}

// Clock tells the store the time when Options.Clock is set.
type Clock interface {
	Now() time.Time
}

// Options configure a Store. Set Client, or URL, or Addrs.
type Options struct {
	// Client is a rueidis client to use, for applications that already
	// hold one. The store does not close it. When nil, the store builds a
	// client from URL or Addrs and closes it on Close.
	Client rueidis.Client
	// URL locates Redis: redis://[user:password@]host:port[/db], rediss://
	// for TLS, with ?addr=host:port repeated for more cluster nodes or
	// sentinels, ?master_set=name to go through sentinels, or
	// unix:///path. A Redis Cluster is detected by itself.
	URL string
	// Addrs lists Redis nodes (a single server, cluster nodes, or, with
	// MasterSet, sentinels). Used when URL is empty.
	Addrs []string
	// MasterSet is the master name monitored by the sentinels in Addrs.
	MasterSet string
	// Username and Password authenticate, overriding the URL's.
	Username, Password string
	// DB selects a database on a single server, overriding the URL's.
	DB int

	// Connections is how many pipelined connections the client keeps to
	// each Redis node, rounded down to a power of two; every decision rides
	// one of them, batched with concurrent ones (rueidis's automatic
	// pipelining). Default 2. Ignored with Client.
	Connections int
	// FlushDelay lets the client wait up to this long after each write to a
	// connection to gather more decisions into the next one (rueidis's
	// MaxFlushDelay): fewer, larger writes under concurrency, at the cost
	// of up to this much added latency. Default 20µs; negative disables it.
	// BENCHMARKS.md measures both defaults. Ignored with Client.
	FlushDelay time.Duration

	// Coalesce is the most takes (and TakeAll batches) the store sends to
	// Redis in one call of its script. While the store's calls to Redis are
	// all in flight (two at a time), concurrent takes queue, and each call
	// that returns hands the queue on as one call that decides every take
	// on its own, in order, atomically, exactly as separate calls would (a
	// batch stays whole: charged to all of its requests or to none). Redis
	// then spends about a quarter less CPU per decision and the client writes
	// less. A take that finds a call free goes at once and alone, so a lone
	// caller waits for nothing. Takes are coalesced on a single server or a
	// Sentinel-managed one (a cluster's keys lie in different slots) and
	// for policies in plain arithmetic (nearly all). A take ends with its
	// context, queued or sent (its call then goes on without it); Timeout
	// after the oldest take of a call arrived bounds the wait of the
	// others. Default 32, at most 256; 1 or less sends every take alone.
	Coalesce int

	// Prefix starts every key. Default "sluice".
	Prefix string
	// HashKeys replaces the client key (an IP address, an API key) in
	// every Redis key name by a digest of fixed length (22 characters,
	// base64url of 128 bits): the first 16 bytes of SHA-256 of the key, or
	// of HMAC-SHA256 keyed by HashSecret when it is set. Redis (its keys,
	// its logs, its backups) then holds no raw client key. The policy name
	// stays readable, and every key of one limited entity still shares one
	// hash tag, so one Cluster slot. Without a secret, anyone who reads
	// the key names can test guesses (every IPv4 address is 2^32 guesses);
	// set HashSecret to prevent that. Every process sharing limits through
	// one Redis must use the same HashKeys and HashSecret: processes that
	// differ count in different keys, so each admits a limit's full count.
	// Turning it on or off, or changing the secret, starts every key
	// afresh (the old keys expire by their TTL). Hashing costs well under a
	// microsecond of the client's CPU per decision and none of Redis's.
	// Default false.
	HashKeys bool
	// HashSecret keys the digest of HashKeys (HMAC-SHA256). Ignored
	// without HashKeys. Default none: a plain SHA-256.
	HashSecret []byte
	// Timeout bounds how long a decision waits for Redis before it takes
	// the OnError path. Default 50ms: far above a healthy Redis's
	// sub-millisecond answer, well below what an API's clients notice.
	// A call whose context cannot be cancelled (context.Background) may
	// give up after 15/16 of it: such calls share deadlines so that each
	// does not pay for a timer of its own. A call whose context ends
	// sooner keeps that end.
	Timeout time.Duration
	// OnError is what to do when Redis fails. Default Local.
	OnError Failure
	// Fallback is the store used by Local. So that it starts from what
	// the store knows when Redis fails, every request that Redis admits in
	// exact mode is charged to it too, and in lease and async mode a key's
	// state in it is set to Redis's count at every call for the key: it
	// must decide in memory, in well under a microsecond. Default: a
	// memstore.Store with default options (on Clock, when set), closed on
	// Close.
	Fallback sluice.Store
	// BreakerThreshold is how many failures in a row open the circuit
	// breaker. Default 5.
	BreakerThreshold int
	// BreakerCooldown is how often, while the breaker is open, the store
	// probes Redis with a PING (each interval jittered by ±25%, however
	// long the outage has lasted): the first probe that succeeds closes the
	// breaker, so decisions go back to Redis within about this long of its
	// return. Probes run in the background, started by the first decision
	// (or Degraded call) after they are due; no caller waits for one.
	// Default 1s.
	BreakerCooldown time.Duration
	// DenyCache is the number of slots of the local cache of keys that
	// Redis has denied. Default 16384 (about 1 MiB); negative disables it.
	DenyCache int
	// Clock, if set, supplies the decision time instead of the Redis
	// server's TIME, and the time of the fallback the store builds. For
	// tests; in production every process must then run a synchronized
	// clock. Key TTLs keep running on the server's clock, which this clock
	// need not keep pace with, so with a Clock every TTL is an hour longer
	// than the state needs.
	Clock Clock
	// OnFailure, if set, is called with every error that sent a decision
	// to the OnError path. It must be fast and safe for concurrent use; use
	// it for logs and metrics.
	OnFailure func(error)
	// OnStateChange, if set, is called when the store enters degraded
	// operation (degraded true: the breaker opened, err is the failure that
	// opened it) and when it leaves it (degraded false, err nil: a probe or
	// a decision reached Redis, or the background connection of
	// ConnectLater succeeded), so that a process can log "Redis failed" and
	// "Redis recovered" once each rather than per decision. A store starts
	// in the state Degraded reports (degraded only with ConnectLater and
	// Redis unreachable), without a call. Calls alternate, are never
	// concurrent, and end on the current state; a flap too brief to observe
	// may go unreported. It must return quickly and must not call the
	// store's decision methods.
	OnStateChange func(degraded bool, err error)
	// LeaseRate is how many decisions per second on one key, in this
	// process, make it hot: a policy in sluice.SyncLease mode takes quota
	// leases on a key only from this rate on, and decides colder keys one
	// request per call. Default 50.
	LeaseRate int
	// LeaseFraction is the most of a limit's Burst (Count, for a window)
	// that one quota lease takes: it bounds the units one process can hold
	// unused, which other processes' clients may be refused meanwhile. A
	// limit for which it makes leases of fewer than 2 units is never
	// leased. Default 0.05; at most 1.
	LeaseFraction float64
	// LeaseTTL is how long a quota lease lasts at most: a lease a crashed
	// process holds returns (a window's with its window, a bucket's as
	// spent tokens that refill from then on) after this long. A lease
	// aims to be spent in about a quarter of it. Default 1s.
	LeaseTTL time.Duration
	// ConnectLater makes New succeed while Redis is unreachable instead of
	// failing, so that a process can start during a Redis outage: the
	// store keeps connecting in the background (after 100ms, then about
	// every second) and decides per OnError until it succeeds, with
	// ErrNotConnected. Options that can never work (a malformed URL, no
	// address) still fail New. Ignored with Client.
	ConnectLater bool
}

// Store is the Redis store. Build one with New.
type Store struct {
	conn      atomic.Pointer[clientBox] // nil until connected
	ownClient bool
	connector *connector // with ConnectLater, until connected
	prefix    string
	deadlines deadlines  // bounds calls by Options.Timeout
	co        *coalescer // nil with Options.Coalesce 1
	onError   Failure
	fallback  sluice.Store
	ownFall   *memstore.Store
	breaker   *breaker
	deny      *denyCache
	clock     Clock
	mono      *clock.Coarse
	onFailure func(error)
	onState   func(degraded bool, err error)
	hash      *hasher // with Options.HashKeys
	quota     quotas  // keys in lease or async mode
	tab       tab     // what the fallback admitted, to charge to Redis (fallback.go)
	// settleSoon is Store.settleSoon, which run calls through this value:
	// a direct call would close a cycle of calls (run, settleSoon, charge,
	// run), and escape analysis would then move the reply buffers that
	// decisions keep on their stacks to the heap.
	settleSoon func()

	// bg tracks the breaker's probes, so that Close waits for them.
	bg struct {
		sync.Mutex
		closed bool
		wg     sync.WaitGroup
	}
	// state is the degraded state last reported to onState.
	state struct {
		sync.Mutex
		reported bool
	}

	policies sync.Map // *sluice.Policy → *compiled
}

var _ sluice.Store = (*Store)(nil)

// New returns a store. It fails if it cannot build a client or, unless
// Options.ConnectLater is set, reach Redis.
func New(opts Options) (*Store, error) {
	s := &Store{
		prefix:    opts.Prefix,
		onError:   opts.OnError,
		fallback:  opts.Fallback,
		clock:     opts.Clock,
		mono:      clock.Default(),
		onFailure: opts.OnFailure,
		onState:   opts.OnStateChange,
	}
	s.quota.init(opts)
	s.quota.now = s.quotaNow
	s.settleSoon = s.startSettling
	if s.prefix == "" {
		s.prefix = "sluice"
	}
	if opts.HashKeys {
		s.hash = newHasher(opts.HashSecret)
	}
	s.deadlines.timeout = opts.Timeout
	if s.deadlines.timeout <= 0 {
		s.deadlines.timeout = 50 * time.Millisecond
	}
	switch {
	case opts.Coalesce == 0:
		s.co = &coalescer{maxBusy: 2, maxBatch: 32}
	case opts.Coalesce > 1:
		s.co = &coalescer{maxBusy: 2, maxBatch: min(opts.Coalesce, 256)}
	}
	if opts.OnError > Deny {
		return nil, fmt.Errorf("redisstore: invalid OnError %d", opts.OnError)
	}
	threshold, cooldown := opts.BreakerThreshold, opts.BreakerCooldown
	if threshold <= 0 {
		threshold = 5
	}
	if cooldown <= 0 {
		cooldown = time.Second
	}
	s.breaker = newBreaker(threshold, cooldown)
	switch {
	case opts.DenyCache == 0:
		s.deny = newDenyCache(16384)
	case opts.DenyCache > 0:
		s.deny = newDenyCache(opts.DenyCache)
	}
	switch {
	case opts.Client != nil:
		s.conn.Store(&clientBox{opts.Client})
	default:
		co, err := clientOption(opts)
		if err != nil {
			return nil, err
		}
		s.ownClient = true
		c, err := rueidis.NewClient(co)
		switch {
		case err == nil:
			s.conn.Store(&clientBox{c})
		case opts.ConnectLater:
			s.connector = connectLater(s, co, err)
		default:
			return nil, fmt.Errorf("redisstore: connecting to %s: %w", strings.Join(co.InitAddress, ","), err)
		}
	}
	s.state.reported = s.client() == nil
	if s.onError == Local && s.fallback == nil {
		s.ownFall = memstore.New(memstore.Options{Clock: opts.Clock})
		s.fallback = s.ownFall
	}
	return s, nil
}

// clientOption maps opts onto rueidis's options.
func clientOption(opts Options) (rueidis.ClientOption, error) {
	var co rueidis.ClientOption
	if opts.URL != "" {
		var err error
		if co, err = rueidis.ParseURL(opts.URL); err != nil {
			return co, fmt.Errorf("redisstore: url: %w", err)
		}
	}
	if len(opts.Addrs) > 0 {
		co.InitAddress = opts.Addrs
	}
	if len(co.InitAddress) == 0 {
		return co, errors.New("redisstore: no Redis address: set Options.URL, Options.Addrs or Options.Client")
	}
	if opts.MasterSet != "" {
		co.Sentinel.MasterSet = opts.MasterSet
	}
	if opts.Username != "" {
		co.Username = opts.Username
	}
	if opts.Password != "" {
		co.Password = opts.Password
	}
	if opts.DB != 0 {
		co.SelectDB = opts.DB
	}
	// Sluice's scripts need no client-side cache.
	co.DisableCache = true
	switch {
	case opts.FlushDelay == 0:
		co.MaxFlushDelay = 20 * time.Microsecond
	case opts.FlushDelay > 0:
		co.MaxFlushDelay = opts.FlushDelay
	}
	conns := opts.Connections
	if conns <= 0 {
		conns = 2
	}
	co.PipelineMultiplex = bits.Len(uint(conns)) - 1 // 2^PipelineMultiplex connections
	return co, nil
}

// Close releases the client and the fallback store the store built itself,
// and stops connecting in the background.
func (s *Store) Close() error {
	if s.connector != nil {
		s.connector.stop()
	}
	s.closeQuotas()
	s.settleAll()
	s.bg.Lock()
	s.bg.closed = true
	s.bg.Unlock()
	s.bg.wg.Wait()
	if c := s.client(); c != nil && s.ownClient {
		c.Close()
	}
	if s.ownFall != nil {
		s.ownFall.Close()
	}
	s.deadlines.stop()
	return nil
}

// Degraded reports whether decisions are taking the OnError path without
// calling Redis: the circuit breaker is open, or (with ConnectLater) the
// store has not connected yet.
//
// While the breaker is open and a probe of Redis is due, a call starts it
// (in the background), so that a process polling Degraded, such as a
// metrics scrape, sees recovery without any decision being made.
func (s *Store) Degraded() bool {
	s.probe()
	degraded, _ := s.degradedState()
	return degraded
}

// compiled is what the store precomputes for a policy.
type compiled struct {
	err      error
	suffixes []string // per limit: ":<i>"
	args     []string // per limit: the script's eight arguments
	take1    []string // the whole ARGV of a take of cost 1 at the server's time; read only
	slots    []uint32
	script   *rueidis.Lua // plainScript, or wideScript if a rule needs it; their penalty forms for a penalty
	pen      []string     // for a penalty: the ARGV after the script's (see penalty.lua)
	cals     []calArg     // the calendar limits, whose windows are sent with every call
	bounds   atomic.Pointer[calBounds]
	// quotaArgs are quota.lua's limit arguments, for a policy in lease or
	// async mode that it runs; nil otherwise (see quotaArgs).
	quotaArgs []string
}

// calArg is a calendar limit of a policy: its period argument, at index
// arg of compiled.args, is replaced at every call by the boundaries of the
// periods around the store's time (see sluice.lua).
type calArg struct {
	arg int
	cal algo.Calendar
}

// calBounds is compiled.args with the calendar limits' boundaries for the
// times from lo to hi (ns), when every calendar limit is in one period.
type calBounds struct {
	lo, hi int64
	args   []string
}

// limitArgs returns the arguments of c's limits for a call now: c.args,
// with the windows of calendar limits around the store's time. Lua has no
// time zone data, so the store computes the boundaries of six consecutive
// periods, the one containing its time in the middle; a call on the
// server's clock lands within them unless the clocks are a period apart.
func (s *Store) limitArgs(c *compiled) []string {
	if len(c.cals) == 0 {
		return c.args
	}
	now := time.Now().UnixNano()
	if s.clock != nil {
		now = s.clock.Now().UnixNano()
	}
	if b := c.bounds.Load(); b != nil && b.lo <= now && now < b.hi {
		return b.args
	}
	b := &calBounds{lo: math.MinInt64, hi: math.MaxInt64, args: slices.Clone(c.args)}
	for _, ca := range c.cals {
		s0, e0 := ca.cal.Period(now)
		s1, _ := ca.cal.Period(s0 - 1)
		s2, _ := ca.cal.Period(s1 - 1)
		_, e1 := ca.cal.Period(e0)
		_, e2 := ca.cal.Period(e1)
		b.lo, b.hi = max(b.lo, s0), min(b.hi, e0)
		var sb strings.Builder
		sb.WriteByte('c')
		for i, t := range []int64{s2, s1, s0, e0, e1, e2} {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.FormatInt(t/int64(time.Microsecond), 10))
		}
		b.args[ca.arg] = sb.String()
	}
	c.bounds.Store(b)
	return b.args
}

func (s *Store) compile(p *sluice.Policy) *compiled {
	if c, ok := s.policies.Load(p); ok {
		return c.(*compiled)
	}
	c := &compiled{script: plainScript}
	for i := range p.Len() {
		r := storekit.Of(p).Rule(i)
		period := int64(r.Period())
		if err := checkPeriod(r.Period()); err != nil {
			c.err = fmt.Errorf("policy %q limit %d: %w", p.Name(), i, err)
			break
		}
		us := period / int64(time.Microsecond)
		g := gcd(r.Count(), us)
		c.suffixes = append(c.suffixes, ":"+strconv.Itoa(i))
		def := fmt.Sprintf("%d:%d:%d:%d;", algCode(r.Algorithm()), r.Count(), us, r.Burst())
		wide := "0"
		if needsWide(r.Algorithm(), r.Count(), us, r.Burst(), r.Count()/g, us/g) {
			wide = "1"
			c.script = wideScript
		}
		if cal := r.Calendar(); cal != nil {
			// Only sluice.lua knows calendar windows.
			sum := sha256.Sum256([]byte(cal.String()))
			def = fmt.Sprintf("%d:%d:%d:%d@%s;", algCode(r.Algorithm()), r.Count(), us, r.Burst(), base64.RawURLEncoding.EncodeToString(sum[:9]))
			c.script = wideScript
			c.cals = append(c.cals, calArg{arg: len(c.args) + 2, cal: cal})
		}
		c.args = append(c.args,
			strconv.Itoa(algCode(r.Algorithm())), strconv.FormatInt(r.Count(), 10), strconv.FormatInt(us, 10),
			strconv.FormatInt(r.Burst(), 10), strconv.FormatInt(r.Count()/g, 10), strconv.FormatInt(us/g, 10), wide, def)
		c.slots = append(c.slots, definitionSlot(p.Name()+"|"+strconv.Itoa(i)+"|"+def))
	}
	if pen := storekit.Of(p).Penalty(); pen != nil {
		// The penalty record is read and written in the decision's call
		// (penalty.lua). The deny cache tells the policy from its copy
		// without a penalty, which shares its limits.
		c.script = map[*rueidis.Lua]*rueidis.Lua{plainScript: penaltyPlainScript, wideScript: penaltyWideScript}[c.script]
		blocks := make([]string, len(pen.Blocks))
		for i, b := range pen.Blocks {
			blocks[i] = strconv.FormatInt(int64(b/time.Microsecond), 10)
		}
		c.pen = []string{strconv.FormatInt(pen.Strikes(), 10), strconv.FormatInt(int64(pen.Forget/time.Microsecond), 10), strings.Join(blocks, ",")}
		c.slots = append(c.slots, storekit.Of(p).PenaltySlot())
	}
	c.take1 = append([]string{"take", "1", "", "0", strconv.Itoa(len(c.suffixes))}, c.args...)
	if c.err == nil {
		c.quotaArgs = quotaArgs(p, c)
	}
	actual, _ := s.policies.LoadOrStore(p, c)
	return actual.(*compiled)
}

// needsWide reports whether a rule's arithmetic can leave the range where
// Lua's doubles are exact integers (below 2^52 here, for headroom): then the
// script computes with multi-digit numbers, otherwise with plain ones, which
// is several times faster. Bucket rules reach a debt of twice the capacity
// Burst×p plus a day of reservations (MaxWait) at l per µs; sliding windows
// reach 2×Count×Period.
func needsWide(a algo.Algorithm, count, period, burst, l, p int64) bool {
	var most big.Int
	switch {
	case a.IsBucket():
		var w big.Int
		most.Mul(big.NewInt(2*burst), big.NewInt(p))
		w.Mul(big.NewInt(int64(sluice.MaxWait/time.Microsecond)), big.NewInt(l))
		most.Add(&most, &w)
	case a == algo.SlidingWindow:
		most.Mul(big.NewInt(2*count), big.NewInt(period))
	default:
		return false
	}
	return most.Cmp(big.NewInt(1<<52)) >= 0
}

// definitions numbers the definitions of limits (policy name, index and
// definition) within the process, for the cache of denials: a denial under
// one definition says nothing of another, such as a raised limit.
var definitions struct {
	sync.Mutex
	m map[string]uint32
}

func definitionSlot(id string) uint32 {
	definitions.Lock()
	defer definitions.Unlock()
	if definitions.m == nil {
		definitions.m = make(map[string]uint32)
	}
	n, ok := definitions.m[id]
	if !ok {
		n = uint32(len(definitions.m)) + 1
		definitions.m[id] = n
	}
	return n
}

func algCode(a algo.Algorithm) int {
	switch a {
	case algo.TokenBucket:
		return 1
	case algo.GCRA:
		return 2
	case algo.FixedWindow:
		return 3
	case algo.SlidingWindow:
		return 4
	}
	return 5
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// appendKeys appends the Redis keys of key under p: the state and auxiliary
// key of each limit, cut from one string.
func (s *Store) appendKeys(out []string, c *compiled, p *sluice.Policy, key string) []string {
	name := p.Name()
	var ln [20]byte
	l := strconv.AppendInt(ln[:0], int64(len(name)), 10)
	var hb [digestLen]byte
	var hashed []byte // the key's digest, with Options.HashKeys
	klen := len(key)
	if s.hash != nil {
		hashed = s.hash.digest(hb[:0], key)
		klen = len(hashed)
	}
	baseLen := len(s.prefix) + 2 + len(l) + 1 + len(name) + 1 + klen + 1
	size := 0
	for _, suf := range c.suffixes {
		size += 2*(baseLen+len(suf)) + 2
	}
	var b strings.Builder
	b.Grow(size)
	for _, suf := range c.suffixes {
		for _, aux := range [2]string{"", ":m"} {
			b.WriteString(s.prefix)
			b.WriteString(":{")
			b.Write(l)
			b.WriteByte(':')
			b.WriteString(name)
			b.WriteByte(':')
			if hashed != nil {
				b.Write(hashed)
			} else {
				b.WriteString(key)
			}
			b.WriteByte('}')
			b.WriteString(suf)
			b.WriteString(aux)
		}
	}
	all, at := b.String(), 0
	for _, suf := range c.suffixes {
		n := baseLen + len(suf)
		out = append(out, all[at:at+n], all[at+n:at+2*n+2])
		at += 2*n + 2
	}
	if c.pen != nil {
		// The penalty record: the same hash tag, suffix ":p".
		out = append(out, all[:baseLen]+":p")
	}
	return out
}

// keys returns the Redis keys of key under p.
func (s *Store) keys(c *compiled, p *sluice.Policy, key string) []string {
	return s.appendKeys(make([]string, 0, 2*len(c.suffixes)+1), c, p, key)
}

// call runs the script for key under p. It returns the script's reply,
// appended to res, or an error that sent the decision to the OnError path.
func (s *Store) call(ctx context.Context, c *compiled, p *sluice.Policy, key, op string, n, arg int64, res []int64) ([]int64, error) {
	if !s.admit() {
		return nil, ErrCircuitOpen
	}
	cctx, cancel := s.deadlines.bound(ctx)
	defer cancel()
	return s.callWithin(ctx, cctx, c, p, key, op, n, arg, res)
}

// callWithin is call within cctx, once the breaker has let it through.
func (s *Store) callWithin(ctx, cctx context.Context, c *compiled, p *sluice.Policy, key, op string, n, arg int64, res []int64) ([]int64, error) {
	args := c.take1
	if op != "take" || n != 1 || s.clock != nil || c.pen != nil || c.cals != nil {
		args = make([]string, 0, 5+len(c.args)+len(c.pen))
		args = append(args, op, strconv.FormatInt(n, 10), s.scriptNow(), strconv.FormatInt(arg, 10), strconv.Itoa(len(c.suffixes)))
		args = append(args, s.limitArgs(c)...)
		args = append(args, c.pen...)
	}
	want := 2 + 4*len(c.suffixes)
	if op == "cancel" {
		want = 2
	}
	var kb [4]string // the keys of up to two limits, on the stack
	return s.run(ctx, cctx, c.script, op, s.appendKeys(kb[:0], c, p, key), args, res, want)
}

// scriptNow is the script's time argument: Options.Clock's time in µs, or
// "" for the server's TIME.
func (s *Store) scriptNow() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
}

// exec runs script within the store's timeout, minding the circuit breaker,
// checks that the reply holds want integers and appends them to res. The
// caller has asked the breaker first.
func (s *Store) exec(ctx context.Context, script *rueidis.Lua, op string, keys, args []string, res []int64, want int) ([]int64, error) {
	cctx, cancel := s.deadlines.bound(ctx)
	defer cancel()
	return s.run(ctx, cctx, script, op, keys, args, res, want)
}

// run is exec within cctx, ctx bounded: an error after ctx has ended is
// the caller's, not Redis's.
func (s *Store) run(ctx, cctx context.Context, script *rueidis.Lua, op string, keys, args []string, res []int64, want int) ([]int64, error) {
	client := s.client()
	if client == nil {
		return nil, s.connector.err()
	}
	reply, err := script.Exec(cctx, client, keys, args).ToArray()
	for try := 0; err != nil && try < maxResends && unanswered(err) && callerDone(ctx) == nil; try++ {
		// The connection had broken while idle (Redis restarted) and the
		// command never reached a server that could run it: the client
		// replaces that connection and the command goes again. The next
		// try may pick another connection that broke the same way, hence
		// the loop; each fails at once.
		reply, err = script.Exec(cctx, client, keys, args).ToArray()
	}
	if err != nil {
		if cerr := callerDone(ctx); cerr != nil {
			return nil, cerr // the caller gave up; Redis is not to blame
		}
		return nil, s.failure(fmt.Errorf("redisstore: %s: %w", op, err))
	}
	if len(reply) != want {
		return nil, s.failure(fmt.Errorf("redisstore: %s: unexpected reply of %d values", op, len(reply)))
	}
	for i := range reply {
		v, err := reply[i].AsInt64()
		if err != nil {
			return nil, s.failure(fmt.Errorf("redisstore: %s: reply value %d: %w", op, i, err))
		}
		res = append(res, v)
	}
	if s.breaker.success() {
		s.changed()
	}
	if s.tab.pending.Load() != 0 {
		s.settleSoon()
	}
	return res, nil
}

// maxResends bounds the resends of a command that found its connection
// broken: one per connection the client keeps to a node, for any sensible
// Options.Connections (default 2). Each fails at once, with no round trip.
const maxResends = 64

// unanswered reports whether err says that Redis closed the connection
// before the command was answered: the write failed (broken pipe, reset),
// or the read found the connection closed (EOF) or reset. Redis answers
// every command it runs before it closes a client's connection, so such a
// command was not run, and sending it again cannot count it twice. The
// exception is a server killed, or a connection killed by CLIENT KILL,
// between running a command and writing all of its reply; there the
// resend counts the request twice, which errs on the side of the limit.
func unanswered(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "write"
}

// failure records err, a failure of Redis, with the breaker, and returns
// it.
func (s *Store) failure(err error) error {
	if s.breaker.failure(err) {
		s.changed()
	}
	return err
}

// decision combines the script's per-limit statuses into a Decision: res
// is its reply for one policy, the time and wait followed by four values per
// limit.
func decision(p *sluice.Policy, res []int64) sluice.Decision {
	return decide(p, res[0], res[2:])
}

// decide combines the four values per limit of p in st, decided at now µs,
// into a Decision.
func decide(p *sluice.Policy, now int64, st []int64) sluice.Decision {
	const us = int64(time.Microsecond)
	var sum algo.Status
	bind := 0
	for i := range p.Len() {
		r := st[4*i:]
		st := algo.Status{Allowed: r[0] == 1, Remaining: r[1], RetryAfter: r[2] * us, ResetAfter: r[3] * us}
		if i == 0 || algo.Binds(sum, st) {
			sum, bind = st, i
		}
	}
	return storekit.Of(p).Decision(bind, sum, now*us)
}

// callerDone returns the caller's context error, also when its deadline has
// passed but the context has not yet noticed: rueidis turns the deadline
// into a socket deadline that can fire a moment before the context's timer.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// degrade answers per OnError after Redis failed with err a request of n
// units (0 for a peek) for key under p. With Local, units that the fallback
// admits are recorded in the tab, to be charged to Redis when it returns.
func (s *Store) degrade(ctx context.Context, c *compiled, p *sluice.Policy, key string, n int64, err error, local func(sluice.Store) (sluice.Decision, error)) (sluice.Decision, error) {
	if cerr := callerDone(ctx); cerr != nil {
		return sluice.Decision{}, cerr
	}
	if s.onFailure != nil {
		s.onFailure(err)
	}
	if s.onError != Local {
		return s.failed(p), nil
	}
	d, lerr := local(s.fallback)
	d.Degraded = true
	if lerr == nil && d.Allowed && n > 0 {
		s.tab.record(p, c, key, n, s.tabTime(d), d)
	}
	return d, lerr
}

// failed is the answer of OnError Allow or Deny for a request under p.
func (s *Store) failed(p *sluice.Policy) sluice.Decision {
	now := time.Now()
	r := storekit.Of(p).Rule(0)
	if s.onError == Allow {
		return sluice.Decision{Allowed: true, Limit: r.Burst(), Remaining: r.Burst(), Time: now, Degraded: true}
	}
	retry := s.failedRetry(now)
	return sluice.Decision{Limit: r.Burst(), RetryAfter: retry, ResetAfter: retry, Time: now, Degraded: true}
}

// failedRetry is the RetryAfter of OnError Deny at now: until the open
// breaker next tries Redis, or a second.
func (s *Store) failedRetry(now time.Time) time.Duration {
	if open, until, _ := s.breaker.state(); open {
		return max(until.Sub(now), time.Millisecond)
	}
	return time.Second
}

// Take implements sluice.Store.
func (s *Store) Take(ctx context.Context, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	c := s.compile(p)
	if c.err != nil {
		return sluice.Decision{}, c.err
	}
	switch quotaMode(p, c) {
	case sluice.SyncLease:
		return s.takeLeased(ctx, c, p, key, n)
	case sluice.SyncAsync:
		return s.takeAsync(ctx, c, p, key, n)
	}
	return s.takeExact(ctx, c, p, key, n)
}

// takeExact is Take in exact mode: every request decided in Redis.
func (s *Store) takeExact(ctx context.Context, c *compiled, p *sluice.Policy, key string, n int64) (sluice.Decision, error) {
	var id [2]uint64
	if s.deny != nil {
		id = s.deny.id(c.slots, key)
		// Only requests of cost 1 are answered from the cache: for them
		// the cached RetryAfter is exact.
		if n == 1 {
			if d, ok := s.deny.get(id, s.localNow(), n); ok {
				return s.cached(d), nil
			}
		}
	}
	var rb [10]int64 // the reply for up to two limits, on the stack
	var res []int64
	err := s.settled(ctx, p, key)
	switch {
	case err != nil:
	case s.coalesces(c.script == plainScript):
		res, err = s.co.take(ctx, s, c, p, key, n, rb[:0])
	default:
		res, err = s.call(ctx, c, p, key, "take", n, 0, rb[:0])
	}
	if err != nil {
		return s.degrade(ctx, c, p, key, n, err, func(f sluice.Store) (sluice.Decision, error) { return f.Take(ctx, p, key, n) })
	}
	d := decision(p, res)
	if d.Allowed {
		s.mirror(ctx, p, key, n)
	}
	if s.deny != nil {
		if c.pen != nil && res[1] != -1 {
			// A denial that does not block is a strike: every one must
			// reach Redis.
			s.deny.forget(id)
		} else {
			s.remember(id, n, d)
		}
	}
	return d, nil
}

// coalesces reports whether a take or batch whose policies are all in
// plain arithmetic or not goes through the coalescer (see
// Options.Coalesce).
func (s *Store) coalesces(plain bool) bool {
	if s.co == nil || !plain {
		return false
	}
	cl := s.client()
	return cl != nil && cl.Mode() != rueidis.ClientModeCluster
}

// remember updates the cache of denials with Redis's answer d for a request
// of cost n: Redis's latest answer replaces whatever the cache held for the
// key, so that a denial is never served once Redis has said more.
func (s *Store) remember(id [2]uint64, n int64, d sluice.Decision) {
	if n == 1 && !d.Allowed && d.RetryAfter > 0 {
		now := s.localNow()
		s.deny.put(id, n, denial{until: now + int64(d.RetryAfter), reset: now + int64(d.ResetAfter), limit: d.Limit, index: d.Index})
	} else {
		s.deny.forget(id)
	}
}

// localNow is the time the cache of denials runs on: Options.Clock when set,
// otherwise the local monotonic clock.
func (s *Store) localNow() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixNano()
	}
	return s.mono.UnixNano()
}

// cached turns a remembered denial into a Decision.
func (s *Store) cached(d denial) sluice.Decision {
	now, wall := s.localNow(), time.Now()
	if s.clock != nil {
		wall = time.Unix(0, now)
	}
	return sluice.Decision{
		Limit:      d.limit,
		RetryAfter: time.Duration(d.until - now),
		ResetAfter: time.Duration(max(d.reset-now, d.until-now)),
		Index:      d.index,
		Time:       wall,
	}
}

// Peek implements sluice.Store.
func (s *Store) Peek(ctx context.Context, p *sluice.Policy, key string) (sluice.Decision, error) {
	c := s.compile(p)
	if c.err != nil {
		return sluice.Decision{}, c.err
	}
	if quotaMode(p, c) != sluice.SyncExact {
		if d, ok := s.peekLocal(p, c, key); ok {
			return d, nil
		}
	}
	var rb [10]int64
	var res []int64
	err := s.settled(ctx, p, key)
	if err == nil {
		res, err = s.call(ctx, c, p, key, "peek", 0, 0, rb[:0])
	}
	if err != nil {
		return s.degrade(ctx, c, p, key, 0, err, func(f sluice.Store) (sluice.Decision, error) { return f.Peek(ctx, p, key) })
	}
	return decision(p, res), nil
}

// Reserve implements sluice.Store.
func (s *Store) Reserve(ctx context.Context, p *sluice.Policy, key string, n int64, maxWait time.Duration) (sluice.Decision, error) {
	c := s.compile(p)
	if c.err != nil {
		return sluice.Decision{}, c.err
	}
	maxUs := int64(maxWait / time.Microsecond)
	if s.deny != nil {
		s.deny.forget(s.deny.id(c.slots, key))
	}
	if quotaMode(p, c) != sluice.SyncExact {
		return s.reserveQuota(ctx, c, p, key, n, maxWait)
	}
	var rb [10]int64
	var res []int64
	err := s.settled(ctx, p, key)
	if err == nil {
		res, err = s.call(ctx, c, p, key, "reserve", n, maxUs, rb[:0])
	}
	if err != nil {
		return s.degrade(ctx, c, p, key, n, err, func(f sluice.Store) (sluice.Decision, error) { return f.Reserve(ctx, p, key, n, maxWait) })
	}
	d := decision(p, res)
	if res[1] == -1 {
		return d, nil // blocked by the policy's penalty
	}
	wait := time.Duration(res[1]) * time.Microsecond
	if res[1] > maxUs {
		d.Allowed, d.RetryAfter = false, wait
		return d, nil
	}
	d.Delay = wait
	d.ResetAfter += wait
	if s.onError == Local {
		s.fallback.Reserve(ctx, p, key, n, maxWait)
	}
	return d, nil
}

// Cancel implements sluice.Store.
func (s *Store) Cancel(ctx context.Context, p *sluice.Policy, key string, n int64, at time.Time) error {
	c := s.compile(p)
	if c.err != nil {
		return c.err
	}
	if s.deny != nil {
		s.deny.forget(s.deny.id(c.slots, key))
	}
	var err error
	if quotaMode(p, c) != sluice.SyncExact {
		_, err = s.quotaCall(ctx, c, p, key, "cancel", n, at.UnixMicro(), 0, "", "", 0, "")
	} else {
		var rb [2]int64
		if _, err = s.call(ctx, c, p, key, "cancel", n, at.UnixMicro(), rb[:0]); err == nil && s.onError == Local {
			s.fallback.Cancel(ctx, p, key, n, at)
		}
	}
	if err != nil {
		if cerr := callerDone(ctx); cerr != nil {
			return cerr
		}
		if s.onFailure != nil {
			s.onFailure(err)
		}
		if s.onError == Local {
			return s.fallback.Cancel(ctx, p, key, n, at)
		}
		return err
	}
	return nil
}

// Reset implements sluice.Store. It also forgets the key in the local cache
// of denials and in the fallback store.
func (s *Store) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	c := s.compile(p)
	if c.err != nil {
		return c.err
	}
	if s.deny != nil {
		s.deny.forget(s.deny.id(c.slots, key))
	}
	if s.fallback != nil {
		if err := s.fallback.Reset(ctx, p, key); err != nil {
			return err
		}
	}
	s.tab.forget(p.Name(), key)
	client := s.client()
	if client == nil {
		return fmt.Errorf("redisstore: reset: %w", s.connector.err())
	}
	cctx, cancel := s.deadlines.bound(ctx)
	defer cancel()
	keys := s.keys(c, p, key)
	if c.quotaArgs != nil {
		// The lease records, and the lease or async view in hand.
		keys = append(keys, keys[0]+":g")
		s.quota.forget(p, key)
	}
	if err := client.Do(cctx, client.B().Del().Key(keys...).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}
