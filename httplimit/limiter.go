// Package httplimit is Sluice's net/http middleware: rules that match
// requests by path, method and host, key them by client IP, headers, query
// parameters, cookies or anything else in the request, and limit them per
// tier, answering 429 Too Many Requests with the headers clients need.
//
// Every rule that matches a request applies to it (per IP AND per user AND
// per endpoint), in the order given, until an Exempt rule matches. A request
// is admitted only if every Reject and Delay rule admits it; a rejected
// request is charged to none of the rules it matched (atomically where the
// store can decide several keys at once, see sluice.TakeAll). Shadow and
// Soft rules never block: they are charged only for admitted requests and
// report what they would have done; so does a Reject rule on the keys its
// Enforce leaves in shadow mode, to roll a limit out to a share of clients.
//
// An adaptive concurrency rule (ConcurrencyRule.Adaptive) protects the
// upstream from overload rather than from a client: it admits the requests
// the other rules let through under a limit that follows the upstream's
// latency (package adaptive), the most important first (Options.Priority),
// and answers those it sheds 503 Service Unavailable with Retry-After.
//
// Responses carry the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) and the legacy X-RateLimit-*
// fields for the rule closest to its limit; a 429 carries Retry-After, names
// every violated rule, and has an application/problem+json body (RFC 9457).
//
// A Limiter is safe for concurrent use.
package httplimit

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/textproto"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/engine"
)

// Headers selects the rate-limit response headers to send.
type Headers uint8

const (
	// HeadersIETF sends RateLimit-Policy and RateLimit.
	HeadersIETF Headers = 1 << iota
	// HeadersLegacy sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix epoch seconds).
	HeadersLegacy
	// HeadersNone sends neither (429s still carry Retry-After).
	HeadersNone
)

// Tiers says where a request's tier comes from.
type Tiers struct {
	// From is the request attribute that names the tier, such as
	// Header("X-Plan") set by a trusted authentication layer. The zero
	// KeyPart means every request is in the Default tier.
	From KeyPart
	// Client is the request attribute that identifies a client for
	// Options.Overrides, when it is not From: JWT("sub") when From is a
	// claim such as JWT("plan") that names the plan, not the customer.
	// Default From.
	Client KeyPart
	// Anchor, if set, is the request attribute that gives the client's
	// billing anchor for calendar quotas (sluice.Limit.Calendar), in
	// calendar.ParseAnchor's form ("15T09:00", or "04-01" for a year),
	// such as JWT("billing_anchor") when the identity provider issues it
	// with the plan. Every calendar quota of the request counts periods
	// from that anchor, keeping its counters (see sluice.Policy.WithAnchor);
	// a client's override anchor (Override.Anchor) wins over it, and a
	// value that does not parse leaves the rule's own anchor. The
	// attribute must come from a trusted source, as From's does. At most
	// MaxAnchors distinct anchors are kept per limit; requests naming
	// another one use the rule's anchor.
	Anchor KeyPart
	// Keys, when non-nil, maps the attribute's value (an API key, say) to a
	// tier name; without it the value is the tier name itself.
	Keys map[string]string
	// Default is the tier of requests whose attribute is absent or names no
	// tier a rule knows. Default "free". A rule's Limit applies to it unless
	// the rule's Tiers override it.
	Default string
}

// Options configures a Limiter. Store and Rules are required; the zero
// value of every other field is a documented default.
type Options struct {
	// Store keeps the counters: memstore for one process, redisstore to
	// share limits between processes.
	Store sluice.Store
	// Rules are applied in order to every request they match.
	Rules []Rule
	// ClientIP finds the client's address for the "ip" key part. Default:
	// the connection's address, IPv6 clients per /64, no forwarding
	// headers believed (clientip.Options{}).
	ClientIP *clientip.Resolver
	// Tiers says where a request's tier comes from. Default: every request
	// is in tier "free".
	Tiers Tiers
	// Headers selects the rate-limit headers. Default HeadersIETF |
	// HeadersLegacy.
	Headers Headers
	// OverLimitHeader is the request header that carries, to the next
	// handler, the names of the Soft rules the request was over (comma
	// separated). Sent by clients, it is always removed. Default
	// "Sluice-Over-Limit".
	OverLimitHeader string
	// FailClosed answers 503 Service Unavailable when the store returns an
	// error. By default such requests are let through (fail open), which
	// the Observer sees as OutcomeError. Stores with their own failure
	// policy (redisstore's OnError) rarely return errors.
	//
	// A store that fails closed by itself (redisstore with OnError Deny,
	// or any store whose FailsClosed method reports true) answers a
	// decision it could not make with a Degraded denial: such a request is
	// answered 503 whatever FailClosed says, since its client used none of
	// its quota, and its rules' outcome is OutcomeError with ErrFailedClosed.
	FailClosed bool
	// CaseSensitivePaths matches rules' paths, and keys the "path" key
	// part, case-sensitively. By default they are compared in lower case,
	// so that "POST /LOGIN" cannot bypass a "/login" rule on an upstream
	// that routes paths regardless of case (Express, ASP.NET and others
	// do by default), and the "path" key part is lower-cased, so that a
	// client cannot split its counter by changing case. Set it only when
	// the upstream distinguishes paths by case.
	CaseSensitivePaths bool
	// Observer, if set, is told about every decision, for metrics and logs.
	Observer Observer
	// Tracer, if set, traces each decision and the store calls it makes
	// (see Tracer), under the request's context's span.
	Tracer Tracer
	// Overrides, if set, gives clients (values of Tiers.Client, or of
	// Tiers.From) a tier or limits of their own, ahead of Tiers.Keys and
	// of the tier a token's claim names. Needs Tiers.From.
	Overrides Overrides
	// Identity verifies the requests' bearer tokens for the "jwt:CLAIM"
	// key parts, in rules' keys and Tiers. Required when one is used. It
	// is asked at most once per request, and only for requests that a
	// rule using a claim matches; a request without a token that verifies
	// has no claims, so that its jwt key parts are missing (the rule keys
	// it by IP, or skips it, per its Missing) and it is in the Default
	// tier.
	Identity Identity
	// Deny lists the clients refused outright: a request from a client on
	// one of these lists is answered 403 Forbidden before any rule is
	// matched or counted (Event.Outcome OutcomeDenied, Event.List the
	// first list it is on).
	Deny []*List
	// Wait waits out a Delay rule's delay d for a request whose context is
	// ctx: it returns nil once the request's turn has come, or an error
	// (ctx's) once its client has gone, which gives its turn back. It is
	// called only after the store has reserved the turn. Default: a timer
	// on the wall clock that ends early when ctx is done. A replay of past
	// traffic, on a store whose clock the log drives, returns nil at once:
	// the turn is already the store's, and waiting would only take the
	// replay's wall time.
	Wait func(ctx context.Context, d time.Duration) error
	// Clock tells the time that Event.Latency and a canceled request's
	// Event.Delay are measured in. Default the wall clock. (The store
	// keeps its own clock for decisions.)
	Clock interface{ Now() time.Time }
	// Priority says which class each request is in for the adaptive
	// concurrency rules (ConcurrencyRule.Adaptive). Default: every request
	// is adaptive.Default.
	Priority Priority
}

// wallClock is the default Options.Clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Tracer starts the spans of traces, such as OpenTelemetry's: a span
// named sluice.decide for each decision, with the attributes sluice.rules
// (the rules decided), sluice.outcomes (each one's outcome) and
// sluice.verdict (admitted, refused or unavailable), and under it one span
// per store call, named sluice.store. and the operation (peek, reserve,
// take_all, take, cancel), with the attribute sluice.rule. No span or
// attribute carries a key. Sluice's server adapts OpenTelemetry to it, so
// that this package does not depend on it.
type Tracer = engine.Tracer

// Span is a span a Tracer started.
type Span = engine.Span

// Identity verifies the credentials a request carries (see
// Options.Identity).
type Identity interface {
	// Claims returns the claims of r's verified token, each as text, or
	// nil when r has no token that verifies. client is r's client
	// address as the Limiter resolves it for the "ip" key part (the zero
	// Addr when it cannot), which an implementation may use to bound the
	// work one client can cause, such as checking forged tokens. The map
	// is not modified by the Limiter. It must be safe for concurrent use,
	// and fast: it is called on the decision path.
	Claims(r *http.Request, client netip.Addr) map[string]string
}

// ErrFailedClosed is the RuleEvent.Err of a rule whose store could not
// decide and denied the request for it (see Options.FailClosed).
var ErrFailedClosed = engine.ErrFailedClosed

// Limiter is the middleware: build one with New, wrap handlers with Handler.
type Limiter struct {
	store      sluice.Store
	rules      []compiled
	ip         *clientip.Resolver
	tiers      Tiers
	headers    Headers
	overLimit  string
	failClosed bool
	eng        *engine.Engine
	// caseSensitive: paths are matched and keyed as sent, not lower-cased.
	caseSensitive bool
	// hasConc: some rule is a concurrency rule.
	hasConc   bool
	obs       Observer
	leaseObs  LeaseObserver // obs, if it implements LeaseObserver
	overrides Overrides
	identity  Identity
	deny      []*List
	wait      func(ctx context.Context, d time.Duration) error
	clock     interface{ Now() time.Time }
	priority  Priority
	pool      sync.Pool
}

// compiled is a rule with its policies built.
type compiled struct {
	Rule
	def   *tierPolicy
	tiers map[string]*tierPolicy
	conc  *sluice.Concurrency // for a concurrency rule; with def, its rate is decided with its slot
	// adaptive is an adaptive concurrency rule's limiter, with its fleet.
	adaptive *adaptive.Limiter
}

// tierPolicy is a rule's policy for one tier.
type tierPolicy struct {
	policy *sluice.Policy
	lim    *sluice.Limiter
	// item is the policy's RateLimit-Policy item under the rule's name.
	item string
	// anchors holds the policy's copies for the billing anchors requests
	// named (Tiers.Anchor); nil unless its limit is a calendar quota.
	anchors *anchorCache
}

// MaxAnchors is the most billing anchors from requests (Tiers.Anchor) that
// a Limiter keeps per calendar limit: a month has 44,640 minutes, and an
// anchor is a limit definition of its own, so the bound keeps memory in
// check whatever tokens arrive.
const MaxAnchors = 4096

// policyItem is p's RateLimit-Policy item under the rule's name, rendered
// once for every request the policy decides.
func policyItem(rule string, p *sluice.Policy) string {
	return string(engine.AppendPolicyItem(nil, rule, p.Limit(0)))
}

// anchorCache is a calendar limit's policies by billing anchor, built on
// first use. It is safe for concurrent use.
type anchorCache struct {
	store sluice.Store
	m     sync.Map // calendar.Anchor → *tierPolicy
	n     atomic.Int64
}

// withAnchor returns tp counting its calendar periods from a: tp itself
// when its limit is no calendar quota, or when MaxAnchors other anchors
// are kept already (or the process holds sluice.MaxAnchorDefinitions
// anchored limits).
func (tp *tierPolicy) withAnchor(a calendar.Anchor) *tierPolicy {
	c := tp.anchors
	if c == nil {
		return tp
	}
	if v, ok := c.m.Load(a); ok {
		return v.(*tierPolicy)
	}
	if c.n.Load() >= MaxAnchors {
		return tp
	}
	p, ok := tp.policy.WithRequestAnchor(a)
	if !ok {
		return tp
	}
	out := tp
	if p != tp.policy {
		sl, err := sluice.NewWithPolicy(c.store, p)
		if err != nil {
			return tp
		}
		out = &tierPolicy{policy: p, lim: sl, item: tp.item}
	}
	v, loaded := c.m.LoadOrStore(a, out)
	if !loaded {
		c.n.Add(1)
	}
	return v.(*tierPolicy)
}

// New validates the options and returns a Limiter.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalidRule)
	}
	l := &Limiter{
		store:         opts.Store,
		ip:            opts.ClientIP,
		tiers:         opts.Tiers,
		headers:       opts.Headers,
		overLimit:     textproto.CanonicalMIMEHeaderKey(opts.OverLimitHeader),
		failClosed:    opts.FailClosed,
		caseSensitive: opts.CaseSensitivePaths,
		obs:           opts.Observer,
		overrides:     opts.Overrides,
		identity:      opts.Identity,
		deny:          append([]*List(nil), opts.Deny...),
		priority:      opts.Priority,
		wait:          opts.Wait,
		clock:         opts.Clock,
	}
	if l.clock == nil {
		l.clock = wallClock{}
	}
	if l.wait == nil {
		l.wait = waitTimer
	}
	for _, li := range l.deny {
		if err := li.validate(); err != nil {
			return nil, fmt.Errorf("deny: %w", err)
		}
	}
	l.leaseObs, _ = opts.Observer.(LeaseObserver)
	l.eng = engine.New(opts.Store, engine.Options{FailClosed: opts.FailClosed, Tracer: opts.Tracer})
	if l.ip == nil {
		r, err := clientip.New(clientip.Options{})
		if err != nil {
			return nil, err
		}
		l.ip = r
	}
	if l.headers == 0 {
		l.headers = HeadersIETF | HeadersLegacy
	}
	if l.overLimit == "" {
		l.overLimit = "Sluice-Over-Limit"
	} else if !isToken(l.overLimit) {
		return nil, fmt.Errorf("%w: over-limit header %q is not a valid header name", ErrInvalidRule, opts.OverLimitHeader)
	}
	if l.tiers.Default == "" {
		l.tiers.Default = "free"
	}
	if l.tiers.From != (KeyPart{}) {
		if err := l.tiers.From.validate(); err != nil {
			return nil, fmt.Errorf("tiers: %w", err)
		}
		if why := l.tiers.From.source().notTier; why != "" {
			return nil, fmt.Errorf("%w: tiers cannot come from the %s key part: %s", ErrInvalidRule, l.tiers.From, why)
		}
	}
	if l.tiers.Client != (KeyPart{}) {
		if err := l.tiers.Client.validate(); err != nil {
			return nil, fmt.Errorf("tiers: client: %w", err)
		}
		if l.tiers.From == (KeyPart{}) {
			return nil, fmt.Errorf("%w: tiers: the client needs tiers from a request attribute", ErrInvalidRule)
		}
		if why := l.tiers.Client.source().notTier; why != "" {
			return nil, fmt.Errorf("%w: tiers: the client cannot be the %s key part: %s", ErrInvalidRule, l.tiers.Client, why)
		}
	}
	if err := l.priority.validate(); err != nil {
		return nil, err
	}
	l.priority.Routes = slices.Clone(l.priority.Routes)
	for i := range l.priority.Routes {
		m := &l.priority.Routes[i].Match
		m.Paths, m.Methods, m.Hosts = slices.Clone(m.Paths), slices.Clone(m.Methods), slices.Clone(m.Hosts)
		if !l.caseSensitive {
			for j, p := range m.Paths {
				m.Paths[j] = lowerPath(p)
			}
		}
	}
	l.priority.Tiers = maps.Clone(l.priority.Tiers)
	usesJWT := l.tiers.From.Source == SourceJWT || l.tiers.Client.Source == SourceJWT || l.priority.From.Source == SourceJWT
	seen := make(map[string]bool)
	for i := range opts.Rules {
		r := opts.Rules[i]
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: two rules are named %q", ErrInvalidRule, r.Name)
		}
		seen[r.Name] = true
		for _, k := range r.Key {
			usesJWT = usesJWT || k.Source == SourceJWT
		}
		c := compiled{Rule: r}
		c.Key = append([]KeyPart(nil), r.Key...)
		if len(c.Key) == 0 && (r.Concurrency == nil || r.Concurrency.Adaptive == nil) {
			c.Key = []KeyPart{IP()}
		}
		c.Match.Paths = append([]string(nil), r.Match.Paths...)
		if !l.caseSensitive {
			for i, p := range c.Match.Paths {
				c.Match.Paths[i] = lowerPath(p)
			}
		}
		c.Match.Methods = append([]string(nil), r.Match.Methods...)
		c.Match.Hosts = append([]string(nil), r.Match.Hosts...)
		if r.Count != nil {
			c.Count = r.Count.clone()
		}
		c.Allow = append([]*List(nil), r.Allow...)
		if r.Enforce != nil {
			roll := *r.Enforce
			c.Enforce = &roll
		}
		if r.Penalty != nil {
			pen := *r.Penalty
			pen.Blocks = append([]time.Duration(nil), pen.Blocks...)
			c.Penalty = &pen
		}
		if r.Concurrency != nil && r.Concurrency.Adaptive != nil {
			var err error
			if c.adaptive, err = adaptiveOf(opts.Store, &r); err != nil {
				return nil, err
			}
			c.Concurrency = &ConcurrencyRule{Limit: r.Concurrency.Limit, Lease: r.Concurrency.Lease, Adaptive: r.Concurrency.Adaptive}
		} else if r.Concurrency != nil {
			ls, ok := opts.Store.(sluice.LeaseStore)
			if !ok {
				return nil, fmt.Errorf("%w: rule %q: the store keeps no leases (it is not a sluice.LeaseStore)", ErrInvalidRule, r.Name)
			}
			var err error
			if c.conc, err = sluice.NewConcurrency(ls, r.Name, r.Concurrency.Limit, r.Concurrency.Lease); err != nil {
				return nil, err
			}
			c.Concurrency = &ConcurrencyRule{Limit: r.Concurrency.Limit, Lease: r.Concurrency.Lease}
			if r.Limit != (sluice.Limit{}) {
				// Its rate is decided with its slot (acquireLeases); the
				// policy shares the rule's name, so that on Redis their
				// keys share a hash slot.
				if c.def, err = newTierPolicy(opts.Store, r.Name, r.Name, r.Limit, nil, sluice.Sync{}); err != nil {
					return nil, err
				}
			}
		} else if r.Action != Exempt {
			var err error
			if c.def, err = newTierPolicy(opts.Store, r.Name, r.Name, r.Limit, r.Penalty, r.Sync); err != nil {
				return nil, err
			}
			c.tiers = make(map[string]*tierPolicy, len(r.Tiers))
			for t, lim := range r.Tiers {
				if c.tiers[t], err = newTierPolicy(opts.Store, r.Name, r.Name+"#"+t, lim, r.Penalty, r.Sync); err != nil {
					return nil, err
				}
			}
			if tp, ok := c.tiers[l.tiers.Default]; ok {
				c.def = tp
			}
		}
		l.hasConc = l.hasConc || c.conc != nil || c.adaptive != nil
		l.rules = append(l.rules, c)
	}
	if usesJWT && l.identity == nil {
		return nil, fmt.Errorf("%w: a jwt key part needs Options.Identity to verify the tokens", ErrInvalidRule)
	}
	l.pool.New = func() any { return new(call) }
	return l, nil
}

// newTierPolicy returns the policy of a rule's limit for one tier, named
// policy: the rule's name for its default limit, "<rule>#<tier>" for a
// tier's, so that each tier keeps its own counters (policies of the same
// name share state, and '#' cannot appear in a rule's name). Headers name
// the rule. pen, if not nil, is the rule's penalty; sync its sync mode.
func newTierPolicy(store sluice.Store, name, policy string, lim sluice.Limit, pen *sluice.Penalty, sync sluice.Sync) (*tierPolicy, error) {
	p, err := sluice.NewPolicy(policy, lim)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", name, err)
	}
	if sync != (sluice.Sync{}) {
		if p, err = p.WithSync(sync); err != nil {
			return nil, fmt.Errorf("rule %q: %w", name, err)
		}
	}
	if pen != nil {
		if p, err = p.WithPenalty(*pen); err != nil {
			return nil, fmt.Errorf("rule %q: %w", name, err)
		}
	}
	sl, err := sluice.NewWithPolicy(store, p)
	if err != nil {
		return nil, err
	}
	tp := &tierPolicy{policy: p, lim: sl, item: policyItem(name, p)}
	if lim.Calendar != nil {
		tp.anchors = &anchorCache{store: store}
	}
	return tp, nil
}

// Handler returns next wrapped by the limiter.
//
// The store's decisions for a request, and giving back what a refused
// request had reserved, run to completion even if the client goes away:
// the store's own timeout bounds them, and a client cannot dodge a charge,
// or have its departure counted as a store error, by hanging up. Waiting
// out a Delay rule's delay ends as soon as the client goes away.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
}

// Middleware returns a Limiter's Handler as a func(http.Handler)
// http.Handler, the shape routers built on net/http take.
func Middleware(opts Options) (func(http.Handler) http.Handler, error) {
	l, err := New(opts)
	if err != nil {
		return nil, err
	}
	return l.Handler, nil
}

// Outcome is what became of a request, or of one rule's part in it.
type Outcome uint8

// The outcomes, with the names used as metric labels.
const (
	OutcomeAllowed       Outcome = iota // "allowed": admitted
	OutcomeLimited                      // "limited": rejected with 429
	OutcomeDelayed                      // "delayed": admitted after waiting its turn
	OutcomeShadowLimited                // "shadow_limited": a Shadow rule would have rejected it
	OutcomeSoftLimited                  // "soft_limited": over a Soft rule, passed on marked
	OutcomeExempt                       // "exempt": an Exempt rule let it through unchecked
	OutcomeError                        // "error": the store failed; let through, or 503 if FailClosed
	OutcomeSkipped                      // "skipped": the rule did not apply (a key part was missing, or the request was rejected first)
	OutcomeCanceled                     // "canceled": the client went away while the request waited out a Delay rule's delay; not served, its turn given back
	OutcomeDenied                       // "denied": the client is on a deny list (Options.Deny); refused with 403, not counted
	OutcomeAllowListed                  // "allow_listed": the client is on one of the rule's Allow lists; the rule did not apply
	OutcomeNotCounted                   // "not_counted": a rule with Count admitted the request, whose response did not match: not charged, or its unit given back
	OutcomeShed                         // "shed": an adaptive concurrency rule shed it to protect the upstream; refused with 503, not charged
)

var outcomeNames = [...]string{"allowed", "limited", "delayed", "shadow_limited", "soft_limited", "exempt", "error", "skipped", "canceled", "denied", "allow_listed", "not_counted", "shed"}

// String returns the outcome's metric label, such as "shadow_limited".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Observer is told about every decision. Observe is called once per request
// that matched at least one rule or was refused for a deny list, before the request is passed on or
// rejected (after any delay), from the request's goroutine; it must not
// keep e or anything in it after returning. For an admitted request that a
// rule with Count applies to, Observe is called instead once the response's
// status is known and the rule settled (charged, or OutcomeNotCounted).
type Observer interface {
	Observe(r *http.Request, e *Event)
}

// Event describes the decision for one request.
type Event struct {
	// Outcome is the request's: allowed, limited, delayed, exempt, error,
	// canceled, shed, denied (no Rules) or allow_listed (every rule it
	// matched skipped it) (a Shadow or Soft rule's outcome is only in
	// Rules).
	Outcome Outcome
	// Rules are the rules that matched, in order.
	Rules []RuleEvent
	// Latency is the time spent deciding, not counting any delay.
	Latency time.Duration
	// Delay is how long the request waited for its turn, a slot of a
	// concurrency rule included (an adaptive rule's queue, for a shed
	// request too). For a canceled request it is how long it had waited
	// when its client went away, not the delay it was given.
	Delay time.Duration
	// Class is the request's priority class (Options.Priority) when an
	// adaptive concurrency rule matched it; adaptive.Default otherwise.
	Class adaptive.Class
	// List is, for OutcomeDenied, the name of the deny list the client is
	// on.
	List string
}

// RuleEvent is one rule's part in a decision.
type RuleEvent struct {
	Rule string
	// Action is the rule's action, or Shadow for a key the rule's
	// Enforce leaves in shadow mode.
	Action Action
	// Tier is the tier whose limit applied: Options.Tiers.Default when the
	// rule's Limit applied (the rule has no override for the request's
	// tier, or no tiers at all); "" for Exempt and skipped rules.
	Tier    string
	Outcome Outcome
	// Key is the rule's composite key for the request. It may identify a
	// person: log it only in a non-reversible form.
	Key      string
	Decision sluice.Decision
	Err      error
	// List is, for OutcomeAllowListed, the name of the allow list the
	// client is on.
	List string
}

// call is the per-request scratch space, pooled.
type call struct {
	q        request
	ev       Event
	keyBuf   []byte
	events   []RuleEvent
	rules    []*compiled
	policies []*tierPolicy
	check    []int // the engine's check of each event, or -1
	eng      engine.Call
	fields   []engine.Field
	leases   []*sluice.Lease
	slots    []*adaptive.Slot // of adaptive concurrency rules
	class    adaptive.Class   // for them, when classed
	classed  bool
	soft     []byte
	cw       countWriter // see serveCounted
}

func (c *call) reset() {
	c.q = request{}
	c.ev = Event{}
	clear(c.events)
	c.events = c.events[:0]
	clear(c.policies)
	c.policies = c.policies[:0]
	clear(c.rules)
	c.rules = c.rules[:0]
	c.check = c.check[:0]
	c.eng.Reset()
	c.fields = c.fields[:0]
	clear(c.leases)
	c.leases = c.leases[:0]
	clear(c.slots)
	c.slots = c.slots[:0]
	c.class, c.classed = adaptive.Default, false
	c.keyBuf = c.keyBuf[:0]
	c.soft = c.soft[:0]
	c.cw = countWriter{}
}

func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if _, ok := r.Header[l.overLimit]; ok {
		r.Header.Del(l.overLimit)
	}
	// The request's state lives in the pooled call: on the stack it would
	// escape (the key sources are called through function values). A call
	// whose handler panics is not put back: the pool makes another.
	c := l.pool.Get().(*call)
	l.serveCall(w, r, next, c)
	c.reset()
	l.pool.Put(c)
}

// serveCall is serve with the request's call. It has one defer, so that
// the compiler inlines it rather than recording it at run time.
func (l *Limiter) serveCall(w http.ResponseWriter, r *http.Request, next http.Handler, c *call) {
	c.q = l.newRequest(r)
	q := &c.q

	var start time.Time
	if l.obs != nil {
		start = l.clock.Now()
	}
	if len(l.deny) > 0 {
		if li := onList(l.deny, q); li != nil {
			c.ev = Event{Outcome: OutcomeDenied, List: li.Name}
			l.observe(r, &c.ev, start)
			l.forbid(w)
			return
		}
	}
	exempt := l.match(c, q)
	if len(c.events) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	c.ev = Event{Rules: c.events, Outcome: OutcomeAllowed, Class: c.class}
	ev := &c.ev
	if allListed(c.events) {
		ev.Outcome = OutcomeAllowListed
		l.observe(r, ev, start)
		next.ServeHTTP(w, r)
		return
	}
	if exempt && len(c.events) == 1 {
		ev.Outcome = OutcomeExempt
		l.observe(r, ev, start)
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx) // see Handler; a context without Done is never canceled
	}
	switch l.decide(ctx, c) {
	case engine.Unavailable:
		ev.Outcome = OutcomeError
		l.cancel(ctx, c)
		l.observe(r, ev, start)
		l.unavailable(w, c)
		return
	case engine.Refused:
		ev.Outcome = OutcomeLimited
		l.cancel(ctx, c)
		l.observe(r, ev, start)
		l.reject(w, c)
		return
	}
	if c.eng.Failed {
		ev.Outcome = OutcomeError
	}
	if l.obs != nil {
		ev.Latency = l.clock.Now().Sub(start)
	}
	if len(c.soft) > 0 {
		r.Header.Set(l.overLimit, string(c.soft))
	}
	if delay := c.eng.MaxDelay(); delay > 0 {
		waitStart := l.clock.Now()
		if err := l.wait(r.Context(), delay); err != nil {
			// The client left: not a store failure, and not a delay
			// served. Its reservations are given back.
			l.cancel(ctx, c)
			l.refundCounted(ctx, c)
			for i := range c.events {
				if e := &c.events[i]; e.Action == Delay && (e.Outcome == OutcomeAllowed || e.Outcome == OutcomeDelayed) {
					e.Outcome = OutcomeCanceled
				}
			}
			ev.Outcome, ev.Delay = OutcomeCanceled, l.clock.Now().Sub(waitStart)
			if l.obs != nil {
				l.obs.Observe(r, ev)
			}
			return
		}
		if ev.Outcome == OutcomeAllowed {
			ev.Outcome = OutcomeDelayed
		}
		ev.Delay = delay
	}
	if l.hasConc {
		if !l.acquireLeases(ctx, w, r, c) {
			return
		}
		defer l.releaseLeases(ctx, c)
		if len(c.slots) > 0 {
			next = slotsHandler(c.slots, next)
		}
	}
	// After the slots, whose rules may decide a rate with them.
	l.writeHeaders(w.Header(), c)
	if c.counting() {
		l.serveCounted(ctx, w, r, next, c)
		return
	}
	if l.obs != nil {
		l.obs.Observe(r, ev)
	}
	next.ServeHTTP(w, r)
}

// waitTimer is the default Options.Wait: a timer on the wall clock.
func waitTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limiter) observe(r *http.Request, ev *Event, start time.Time) {
	if l.obs != nil {
		ev.Latency = l.clock.Now().Sub(start)
		l.obs.Observe(r, ev)
	}
}

// match collects the rules that apply to the request, with their keys and
// policies, into c, stopping at the first Exempt rule. It reports whether
// an Exempt rule matched.
func (l *Limiter) match(c *call, q *request) bool {
	type span struct{ i, j int }
	var spansArr [16]span
	spans := spansArr[:0]
	for i := range l.rules {
		rule := &l.rules[i]
		if !rule.Match.matches(q.r, q.path) {
			continue
		}
		if len(rule.Allow) > 0 {
			if li := onList(rule.Allow, q); li != nil {
				c.events = append(c.events, RuleEvent{Rule: rule.Name, Action: rule.Action, Outcome: OutcomeAllowListed, List: li.Name})
				c.policies = append(c.policies, nil)
				c.rules = append(c.rules, rule)
				spans = append(spans, span{len(c.keyBuf), len(c.keyBuf)})
				continue
			}
		}
		if rule.Action == Exempt {
			c.events = append(c.events, RuleEvent{Rule: rule.Name, Action: Exempt, Outcome: OutcomeExempt})
			c.rules = append(c.rules, rule)
			c.policies = append(c.policies, nil)
			spans = append(spans, span{len(c.keyBuf), len(c.keyBuf)})
			break
		}
		var (
			tp       *tierPolicy
			ruleTier string
		)
		if (rule.conc == nil && rule.adaptive == nil) || rule.def != nil {
			tp, ruleTier = l.policyOf(rule, q)
		}
		start := len(c.keyBuf)
		skip := false
		for _, k := range rule.Key {
			var ok bool
			if c.keyBuf, ok = k.appendKey(q, c.keyBuf); ok {
				continue
			}
			if rule.Missing == MissingSkip {
				skip = true
				break
			}
			// Keyed by the client's address in place of the missing
			// part, marked so that it never meets a value's key.
			c.keyBuf, _ = IP().appendKey(q, append(c.keyBuf, 'm'))
		}
		if skip {
			c.keyBuf = c.keyBuf[:start]
			c.events = append(c.events, RuleEvent{Rule: rule.Name, Action: rule.Action, Outcome: OutcomeSkipped})
			c.policies = append(c.policies, nil)
			c.rules = append(c.rules, rule)
			spans = append(spans, span{start, start})
			continue
		}
		if rule.adaptive != nil && !c.classed {
			c.class, c.classed = l.classOf(q), true
		}
		c.events = append(c.events, RuleEvent{Rule: rule.Name, Action: rule.Action, Tier: ruleTier, Outcome: OutcomeAllowed})
		c.policies = append(c.policies, tp)
		c.rules = append(c.rules, rule)
		spans = append(spans, span{start, len(c.keyBuf)})
	}
	if len(spans) > 0 {
		keys := string(c.keyBuf) // one allocation for every key of the request
		for i, s := range spans {
			e := &c.events[i]
			e.Key = keys[s.i:s.j]
			if en := c.rules[i].Enforce; en != nil && e.Outcome == OutcomeAllowed && !en.Enforces(e.Rule, e.Key) {
				e.Action = Shadow // a key the rollout leaves in shadow mode
			}
		}
	}
	return len(c.events) > 0 && c.events[len(c.events)-1].Action == Exempt
}

// decide decides the request's rate rules on the engine: a Delay rule
// reserves its turn, a Reject rule is charged with the others (or, with
// Count and not in reserve mode, checked now and charged once its response
// is known), a Shadow or Soft rule is charged only if the request is
// admitted (or checked, with Count). It records each rule's outcome and
// decision in its event, and the Soft rules the request is over.
func (l *Limiter) decide(ctx context.Context, c *call) engine.Verdict {
	for i := range c.events {
		e, tp, rule := &c.events[i], c.policies[i], c.rules[i]
		if tp == nil || rule.conc != nil || e.Outcome != OutcomeAllowed {
			c.check = append(c.check, -1)
			continue
		}
		ch := engine.Check{Policy: tp.policy, Key: e.Key, Cost: 1, Name: rule.Name, Item: tp.item}
		counted := rule.Count != nil
		switch e.Action {
		case Delay:
			ch.Mode, ch.MaxDelay = engine.Delay, rule.MaxDelay
		case Reject:
			if ch.Mode = engine.Enforce; counted && !c.reserves(i) {
				ch.Mode = engine.Probe
			}
		default: // Shadow, Soft
			if ch.Mode = engine.Shadow; counted {
				// A Count rule's key in shadow mode (Rule.Enforce) is
				// checked now and charged once its response matches, as
				// an enforced key is in CountAfter mode.
				ch.Mode = engine.ShadowProbe
			}
		}
		c.check = append(c.check, c.eng.Add(ch))
	}
	v, _ := l.eng.Decide(ctx, &c.eng) // errors are in the results: never StopOnError
	for i, j := range c.check {
		if j < 0 {
			continue
		}
		e, r := &c.events[i], &c.eng.Results[j]
		e.Decision, e.Err = r.Decision, r.Err
		switch r.Outcome {
		case engine.Limited:
			e.Outcome = OutcomeLimited
		case engine.Delayed:
			e.Outcome = OutcomeDelayed
		case engine.Skipped:
			e.Outcome = OutcomeSkipped
		case engine.Error:
			e.Outcome = OutcomeError
		case engine.ShadowLimited:
			if e.Outcome = OutcomeShadowLimited; e.Action == Soft {
				e.Outcome = OutcomeSoftLimited
				if len(c.soft) > 0 {
					c.soft = append(c.soft, ", "...)
				}
				c.soft = append(c.soft, e.Rule...)
			}
		}
	}
	return v
}

// cancel gives back the quota of every reservation of a request that will
// not be served.
func (l *Limiter) cancel(ctx context.Context, c *call) {
	l.eng.Cancel(ctx, &c.eng)
}

// lowerPath returns p in lower case, without allocating when it has no
// upper-case letter.
func lowerPath(p string) string {
	for i := 0; i < len(p); i++ {
		if b := p[i]; b >= 0x80 || 'A' <= b && b <= 'Z' {
			return strings.ToLower(p)
		}
	}
	return p
}

// cleanPath returns the path rules are matched against: cleaned, so that
// "/api//search/" and "/api/x/../search" count as "/api/search".
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if isClean(p) {
		return p
	}
	if p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p)
}

// isClean reports whether p is a path that path.Clean leaves as it is, or
// rather a sufficient condition for it, checked in one pass: it starts
// with '/', has no "//" and no "/." (so no "." or ".." element), and ends
// with '/' only if it is "/".
func isClean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; ; {
		j := strings.IndexByte(p[i+1:], '/')
		if j < 0 {
			return i+1 < len(p) && p[i+1] != '.' || len(p) == 1
		}
		// p[i] is '/', and the next '/' is at i+1+j.
		if j == 0 || p[i+1] == '.' {
			return false
		}
		i += 1 + j
	}
}
