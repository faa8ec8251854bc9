// Package rls is Sluice's Envoy Rate Limit Service: the
// envoy.service.ratelimit.v3.RateLimitService gRPC API (RLS v3) and the HTTP
// POST /json form of it, as envoyproxy/ratelimit serves them, deciding with
// Sluice's stores and algorithms over a descriptor rule tree.
//
// # Decisions
//
// A request names a domain and carries descriptors. Each descriptor is
// matched against the rule tree (Rules); its cost is its own hits_addend
// when set, else the request's, else 1. A cost of 0 checks the descriptor's
// limit without charging it (sluice.Store.Peek). A descriptor that carries a
// limit of its own (descriptor.limit) is decided by that limit instead of
// the configured one (Rules.Override). A descriptor an operator gave
// limits of its own (Options.Overrides: the admin API's descriptor
// overrides) is decided by them, in place of both.
//
// Before any matching, the tree's lists (descriptor.Set.WithLists) are
// consulted: a request with a descriptor carrying a value on a deny list
// is OVER_LIMIT at once, nothing counted, with DeniedBody as its raw_body;
// a descriptor carrying a value on an allow list is not limited. A rule
// with a penalty blocks keys through its policy; a penalized descriptor
// checked with a cost of 0 and refused is then taken for one unit, which
// the store refuses and counts as a strike (should a unit have freed in
// between, it is charged, and the request stays refused).
//
// Every descriptor of one request is decided as one batch with
// sluice.TakeAll: either every limited descriptor is charged, or, if any is
// over its limit, none is. This differs from envoyproxy/ratelimit, which
// charges every descriptor of a request even when another one rejects it;
// with Sluice a rejected request consumes no quota. Shadow-mode descriptors,
// and the counters a descriptor's enforce leaves in shadow mode
// (descriptor.Match.Shadow), are decided on their own after the batch
// (charged only when the request is admitted) and never reject; they are
// reported as shadow_limited when over, and, as an enforced limit would
// be, charged nothing then: shadow mode is a dry run of enforcement.
// Unlimited descriptors, allow-listed ones (a node without a limit) and
// descriptors that match no rule are OK with no limit. A cost larger than
// anything a limit could ever admit is OVER_LIMIT for that descriptor, not
// an error; its status tells the limit's state, uncharged, and the answer
// has no Retry-After.
//
// current_limit is the limit exactly, with unit_multiplier where its
// period is not one whole unit (descriptor.Display), and
// duration_until_reset is in whole seconds, rounded up.
//
// # Failures
//
// Invalid requests are answered with codes.InvalidArgument (HTTP 400) and a
// message; they never reach the store. When the store fails, Options.OnStoreError
// chooses between codes.Unavailable (as envoyproxy/ratelimit answers;
// Envoy's failure_mode_deny then decides) and the store's own failure
// policy (the Redis store's OnError: local, allow or deny), whose decisions
// are marked as degraded in the response's dynamic metadata and in metrics.
//
// A Service is safe for concurrent use.
package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/engine"
)

// Failure chooses what the service answers when the store fails.
type Failure int

const (
	// FailUnavailable answers codes.Unavailable (HTTP 503) when the store
	// fails or decides by its failure policy instead of deciding itself:
	// what envoyproxy/ratelimit does, leaving the choice to Envoy's
	// failure_mode_deny. The default.
	FailUnavailable Failure = iota
	// FailOnError answers with the decisions the store made by its own
	// failure policy (the Redis store's OnError), marked as degraded. A
	// store that returns an error, deciding nothing, still gets
	// codes.Unavailable.
	FailOnError
)

// Headers selects the rate-limit headers the service asks Envoy to add to
// the client's response (response_headers_to_add). Values combine with |.
type Headers int

const (
	// HeadersIETF adds RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-11, rendered as the gateway
	// renders them.
	HeadersIETF Headers = 1 << iota
	// HeadersLegacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix epoch seconds).
	HeadersLegacy
	// HeadersRetryAfter adds Retry-After (seconds) to OVER_LIMIT answers.
	HeadersRetryAfter
	// HeadersOff adds no header at all.
	HeadersOff
	// HeadersEnvoy adds the three headers envoyproxy/ratelimit adds when
	// its LIMIT_RESPONSE_HEADERS_ENABLED is set, under the names of
	// Options.EnvoyHeaderNames: the limit, the units remaining and the
	// seconds until the reset (not a Unix time), describing the limit the
	// legacy headers describe.
	HeadersEnvoy
)

// EnvoyHeaderNames are the names of the HeadersEnvoy headers, as
// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER set them. An empty name is its default:
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, as there.
type EnvoyHeaderNames struct {
	Limit, Remaining, Reset string
}

// The default EnvoyHeaderNames, envoyproxy/ratelimit's own.
const (
	DefaultEnvoyLimitHeader     = "RateLimit-Limit"
	DefaultEnvoyRemainingHeader = "RateLimit-Remaining"
	DefaultEnvoyResetHeader     = "RateLimit-Reset"
)

// DefaultHeaders is what a zero Options.Headers selects.
const DefaultHeaders = HeadersIETF | HeadersRetryAfter

// Defaults of the bounds on a request.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
	DefaultMaxValueBytes  = 1024
	DefaultMaxHitsAddend  = algo.MaxCount
	maxDomainBytes        = 256
)

// MetadataDegraded is the field of the response's dynamic_metadata that is
// true when a decision came from the store's failure policy rather than the
// store itself (FailOnError).
const MetadataDegraded = "sluice_degraded"

// The fields of the response's dynamic_metadata for quota-mode descriptors
// (quota_mode: true), as envoyproxy/ratelimit names them: whether any of
// the request's descriptors matched a quota-mode limit, and the indexes
// (from 0, in the request's order) of those over it. A quota-mode limit
// never denies: these fields are how Envoy (its dynamic metadata under
// envoy.filters.http.ratelimit) learns that a soft quota ran out, to route
// or log on it.
const (
	MetadataQuotaModeEnabled    = "quotaModeEnabled"
	MetadataQuotaModeViolations = "quotaModeViolations"
)

// Options configure a Service. Store and Rules are required; every other
// field has a usable zero value.
type Options struct {
	// Store keeps the counters. Required.
	Store sluice.Store
	// Rules is the rule tree; SetRules replaces it. Required.
	Rules Rules
	// Observer, if non-nil, receives every request's decisions.
	Observer Observer
	// Tracer, if non-nil, traces each decision and its store calls (see
	// engine.Tracer).
	Tracer engine.Tracer
	// OnStoreError chooses the answer when the store fails. Default
	// FailUnavailable.
	OnStoreError Failure
	// Headers selects the response headers. Default DefaultHeaders.
	Headers Headers
	// EnvoyHeaderNames name the HeadersEnvoy headers; see EnvoyHeaderNames
	// for the defaults.
	EnvoyHeaderNames EnvoyHeaderNames
	// MaxDescriptors bounds the descriptors of one request. Default 64.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor. Default 32.
	MaxEntries int
	// MaxValueBytes bounds each entry's key and value. Default 1024.
	MaxValueBytes int
	// MaxHitsAddend bounds hits_addend. Default algo.MaxCount (10^12).
	MaxHitsAddend uint64
	// Overrides, if non-nil, holds descriptors that an operator gave
	// limits of their own: they apply in place of the tree's (and of a
	// descriptor's own limit) while the tree has their domain.
	Overrides Overrides
	// Anchor, if set, is the key of a descriptor entry whose value is the
	// client's billing anchor for calendar quotas, in calendar.ParseAnchor's
	// form ("15T09:00", or "04-01" for a year), such as an entry Envoy
	// fills from a verified token's billing_anchor claim. When any
	// descriptor of a request carries such an entry whose value parses
	// (the first one counts), every calendar quota of the tree decided for
	// that request counts its periods from that anchor, keeping its
	// counters (see descriptor.Rule.WithAnchor); a value that does not
	// parse is ignored. At most descriptor.MaxAnchors distinct anchors are
	// kept per rule (and sluice.MaxAnchorDefinitions anchored limits
	// per process); requests naming another one use the rule's own
	// anchor. An operator's override and a descriptor's own limit are not
	// anchored.
	Anchor string
}

// Overrides finds the limits an operator gave one descriptor (the admin
// API's descriptor overrides).
type Overrides interface {
	// Override returns the match of the descriptor's own limits (see
	// descriptor.KeyOverride), if it has some. It is called for every
	// descriptor of every request, so it must be fast (one map lookup
	// at most), and safe for concurrent use.
	Override(domain string, entries []descriptor.Entry) (descriptor.Match, bool)
}

// ErrInvalidRequest is wrapped by the errors of requests the service
// refuses to decide.
var ErrInvalidRequest = errors.New("rls: invalid request")

// errDegraded is why a decision of the store's failure policy is refused
// under FailUnavailable.
var errDegraded = errors.New("it decided by its failure policy (on_error)")

// ErrStore is wrapped by the errors of requests the store could not decide.
var ErrStore = errors.New("rls: store could not decide")

// Service is the rate-limit service. Build it with New; it is safe for
// concurrent use.
type Service struct {
	opts  Options
	eng   *engine.Engine
	style engine.Style
	names *engine.Names
	pool  sync.Pool // *call
}

// New returns a service for the options.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("rls: nil store")
	}
	if opts.Rules == nil {
		return nil, errors.New("rls: nil rules")
	}
	if opts.OnStoreError != FailUnavailable && opts.OnStoreError != FailOnError {
		return nil, fmt.Errorf("rls: invalid OnStoreError %d", opts.OnStoreError)
	}
	if opts.Headers == 0 {
		opts.Headers = DefaultHeaders
	}
	if opts.Headers&HeadersOff != 0 {
		opts.Headers = HeadersOff
	}
	n := &opts.EnvoyHeaderNames
	for _, f := range []struct {
		name *string
		def  string
	}{{&n.Limit, DefaultEnvoyLimitHeader}, {&n.Remaining, DefaultEnvoyRemainingHeader}, {&n.Reset, DefaultEnvoyResetHeader}} {
		if *f.name == "" {
			*f.name = f.def
		}
		if !httpguts.ValidHeaderFieldName(*f.name) {
			return nil, fmt.Errorf("rls: invalid header name %q in EnvoyHeaderNames", *f.name)
		}
	}
	if opts.MaxDescriptors <= 0 {
		opts.MaxDescriptors = DefaultMaxDescriptors
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxValueBytes <= 0 {
		opts.MaxValueBytes = DefaultMaxValueBytes
	}
	if opts.MaxHitsAddend == 0 || opts.MaxHitsAddend > DefaultMaxHitsAddend {
		opts.MaxHitsAddend = DefaultMaxHitsAddend
	}
	s := &Service{opts: opts, style: opts.Headers.style(),
		names: engine.NewNames(opts.EnvoyHeaderNames.Limit, opts.EnvoyHeaderNames.Remaining, opts.EnvoyHeaderNames.Reset),
		// Every descriptor's status is told, a store error fails the
		// request (Unavailable), and a denial of the store's failure
		// policy is a denial, the protocol having no other answer.
		eng: engine.New(opts.Store, engine.Options{Report: true, StopOnError: true, DegradedDenials: true, Tracer: opts.Tracer}),
	}
	s.pool.New = func() any { return new(call) }
	return s, nil
}

// Rules returns the service's rule tree. A Service's options never change:
// a new configuration is a new Service on the same store (see Current),
// and counters carry over wherever the new tree gives a limit the same
// policy (its name and index).
func (s *Service) Rules() Rules { return s.opts.Rules }

// Decider decides rate-limit requests, as Service.Decide does: a
// *Service, or Current. The gRPC server and the HTTP handlers serve one.
type Decider interface {
	Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

var _ Decider = (*Service)(nil)

// Current is the service of the moment: each call goes to the *Service
// the function returns then, and runs whole under it. A server that builds
// a Service per configuration, and swaps it on reload, serves Current.
type Current func() *Service

// Decide decides req on the current service.
func (f Current) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return f().Decide(ctx, req)
}

// ShouldRateLimit implements the RLS v3 RateLimitService. Invalid requests
// get codes.InvalidArgument; a store failure gets codes.Unavailable unless
// OnStoreError is FailOnError and the store decided by its failure policy.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return grpcService{d: s}.ShouldRateLimit(ctx, req)
}

// grpcService serves a Decider as the RLS v3 RateLimitService.
type grpcService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	d Decider
}

func (g grpcService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := g.d.Decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrStore):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// item is the state of one descriptor during a call.
type item struct {
	hits    int64
	check   int // its check in the engine's call, or -1 when no limit applies
	d       sluice.Decision
	outcome Outcome
	allow   string // the allow list that exempts the descriptor
	denied  bool   // the descriptor carries a value on a deny list
}

// call is the scratch space of one request, pooled so that a decision
// allocates little beyond the protobuf response.
type call struct {
	entries []descriptor.Entry
	ms      []descriptor.Match
	items   []item
	events  []DescriptorEvent
	eng     engine.Call
	fields  []engine.Field
	// deniedBy is the deny list that refused the request, if one did.
	deniedBy string
}

func (c *call) reset(n, entries int) {
	c.entries = grow(c.entries, entries)
	c.ms = grow(c.ms, n)[:n]
	c.items = grow(c.items, n)[:n]
	c.events = grow(c.events, n)[:n]
	c.eng.Reset()
	c.fields = c.fields[:0]
	c.deniedBy = ""
	clear(c.ms)
	clear(c.items)
	clear(c.events)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// Decide decides req as ShouldRateLimit does, with plain errors: they wrap
// ErrInvalidRequest for a request that cannot be decided and ErrStore when
// the store failed.
func (s *Service) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	rules := s.opts.Rules
	nEntries, err := s.validate(req)
	if err != nil {
		s.observeError(ctx, rules, req.GetDomain(), err, start)
		return nil, err
	}
	c := s.pool.Get().(*call)
	defer s.pool.Put(c)
	c.reset(len(req.Descriptors), nEntries)
	resp, err := s.decide(ctx, c, rules, req)
	if s.opts.Observer != nil {
		ev := Event{Domain: domainLabel(rules, req.Domain), Latency: time.Since(start), Err: err, Descriptors: c.events}
		switch {
		case errors.Is(err, ErrInvalidRequest):
			ev.Code = CodeInvalid
		case err != nil:
			ev.Code = CodeError
		case c.deniedBy != "":
			ev.Code, ev.DeniedBy = CodeDenied, c.deniedBy
		case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
			ev.Code = CodeOverLimit
		default:
			ev.Code = CodeOK
		}
		s.opts.Observer.Observe(ctx, &ev)
	}
	return resp, err
}

func domainLabel(r Rules, domain string) string {
	if r.HasDomain(domain) {
		return domain
	}
	return ""
}

func (s *Service) observeError(ctx context.Context, r Rules, domain string, err error, start time.Time) {
	if s.opts.Observer == nil {
		return
	}
	ev := Event{Domain: domainLabel(r, domain), Code: CodeInvalid, Latency: time.Since(start), Err: err}
	s.opts.Observer.Observe(ctx, &ev)
}

// decide matches the request's descriptors (match), decides the limited
// ones on the engine and answers.
func (s *Service) decide(ctx context.Context, c *call, rules Rules, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.match(c, rules, req); err != nil {
		return nil, err
	}
	if c.deniedBy != "" {
		return s.denied(c), nil
	}
	return s.check(ctx, c)
}

// match finds what applies to each descriptor: a deny list (which refuses
// the request; the rest is then only looked up for deny lists), an allow
// list, an operator's override, the request's own limit or the rule tree's
// match, with the request's billing anchor and the tree's replaces
// applied.
func (s *Service) match(c *call, rules Rules, req *rlsv3.RateLimitRequest) error {
	reqHits := int64(req.HitsAddend)
	if reqHits == 0 {
		reqHits = 1 // proto3 cannot tell 0 from unset; unset means 1
	}
	for i, d := range req.Descriptors {
		from := len(c.entries)
		for _, e := range d.Entries {
			c.entries = append(c.entries, descriptor.Entry{Key: e.Key, Value: e.Value})
		}
		es := c.entries[from:len(c.entries):len(c.entries)]
		c.items[i].hits = reqHits
		if h := d.HitsAddend; h != nil {
			c.items[i].hits = int64(h.Value) // bounded by validate
		}
		if list, ok := rules.Denied(es); ok {
			c.items[i].denied = true
			if c.deniedBy == "" {
				c.deniedBy = list
			}
			continue
		}
		if c.deniedBy != "" {
			continue // refused: the rest is only looked up for deny lists
		}
		if list, ok := rules.AllowListedBy(es); ok {
			c.items[i].allow = list
			continue
		}
		if m, ok := s.override(rules, req.Domain, es); ok {
			c.ms[i] = m
		} else if l := d.Limit; l != nil {
			m, err := rules.Override(req.Domain, es, l.RequestsPerUnit, descriptor.Unit(l.Unit))
			if err != nil {
				return fmt.Errorf("%w: descriptors[%d].limit: %w", ErrInvalidRequest, i, err)
			}
			c.ms[i] = m
		} else {
			c.ms[i] = rules.Match(req.Domain, es)
		}
	}
	if c.deniedBy != "" {
		return nil
	}
	if a, ok := s.anchorOf(c.entries); ok {
		for i := range c.ms {
			if r := c.ms[i].Rule; r != nil {
				c.ms[i].Rule = r.WithAnchor(a)
			}
		}
	}
	descriptor.ApplyReplaces(c.ms)
	return nil
}

// check decides the matched descriptors on the engine and answers.
func (s *Service) check(ctx context.Context, c *call) (*rlsv3.RateLimitResponse, error) {
	// Each limited descriptor is a check of the engine's: a cost of 0
	// (hits_addend 0) checks the limit without charging it, and passes
	// when one more unit would: at exactly its limit it is OVER_LIMIT.
	// envoyproxy/ratelimit decides a descriptor by its counter after
	// adding the request's hits, refusing only a count above the limit
	// (limiter/base_limiter.go: over when limitAfterIncrease > the limit's
	// requests_per_unit; the Redis fixed window cache adds the hits with
	// INCRBY, here 0, so the count after is the count before); so its
	// check at exactly the limit is OK with 0 remaining, and only a
	// counter already past the limit refuses it. Its counters pass their
	// limits because it counts the hits of the requests it refuses. Sluice
	// never counts a refused charge, so its counters stop at their limits,
	// and a check that passed at the limit would pass for ever: checking
	// on the request and charging a failure when the stream is done would
	// then let every attempt through. The gateway's count rules check the
	// same way.
	for i := range c.items {
		it, m := &c.items[i], &c.ms[i]
		r := m.Rule
		ev := &c.events[i]
		ev.Hits = it.hits
		it.check = -1
		switch {
		case r == nil:
			it.outcome = OutcomeNoRule
			switch {
			case it.allow != "":
				it.outcome, ev.AllowList = OutcomeAllowListed, it.allow
			case m.Replaced:
				it.outcome = OutcomeReplaced
			}
			continue
		case r.Unlimited:
			it.outcome = OutcomeUnlimited
			ev.Name = metricName(r)
			continue
		}
		ev.Name, ev.Key = metricName(r), m.Key
		ch := engine.Check{Policy: r.Policy, Key: m.Key, Cost: it.hits, Name: displayName(r)}
		if r.DenyAll || ch.Policy == nil {
			d := display(r, 0)
			ch.Policy, ch.Show = nil, sluice.Limit{Algorithm: sluice.FixedWindow, Count: d.Count, Period: d.Period}
		}
		switch shadow := m.Shadow(); {
		case shadow && it.hits == 0:
			ch.Mode, ch.Cost = engine.ShadowProbe, 1
		case shadow:
			ch.Mode = engine.Shadow
		case it.hits == 0:
			ch.Mode, ch.Cost = engine.Probe, 1
		default:
			ch.Mode = engine.Enforce
		}
		it.check = c.eng.Add(ch)
	}
	v, err := s.eng.Decide(ctx, &c.eng)
	if err != nil {
		if errors.Is(err, sluice.ErrInvalidBatch) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		return nil, s.storeFailed(c, err)
	}
	over := v != engine.Admitted
	degraded := false
	for i := range c.items {
		it := &c.items[i]
		if it.check >= 0 {
			r := &c.eng.Results[it.check]
			it.d = r.Decision
			switch r.Outcome {
			case engine.Limited:
				it.outcome = OutcomeLimited
			case engine.ShadowLimited:
				it.outcome = OutcomeShadowLimited
			case engine.Skipped:
				it.outcome = OutcomeSkipped
			default:
				it.outcome = OutcomeAllowed
			}
		}
		degraded = degraded || it.d.Degraded
		c.events[i].Outcome = it.outcome
		c.events[i].Decision = it.d
	}
	if degraded && s.opts.OnStoreError == FailUnavailable {
		return nil, s.storeFailed(c, errDegraded)
	}
	return s.response(c, over, degraded), nil
}

// storeFailed marks every descriptor with a limit as failed in the events
// and returns the error the request fails with: which of them the store
// had decided no longer matters, since the request gets no decision.
func (s *Service) storeFailed(c *call, err error) error {
	for j := range c.items {
		c.events[j].Outcome = c.items[j].outcome
		if c.items[j].check >= 0 {
			c.events[j].Outcome = OutcomeError
		}
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// anchorOf returns the billing anchor that entries carry (Options.Anchor):
// the first value of an entry of that key that parses.
func (s *Service) anchorOf(entries []descriptor.Entry) (calendar.Anchor, bool) {
	if s.opts.Anchor == "" {
		return calendar.Anchor{}, false
	}
	for _, e := range entries {
		if e.Key != s.opts.Anchor {
			continue
		}
		if a, err := calendar.ParseAnchor(e.Value); err == nil {
			return a, true
		}
	}
	return calendar.Anchor{}, false
}

func metricName(r *descriptor.Rule) string {
	if r.MetricKey != "" {
		return r.MetricKey
	}
	return r.Domain + ".override" // a request's own limit: never its values
}

// response builds the protobuf answer. Statuses, their limits and
// durations are allocated as one array each.
func (s *Service) response(c *call, over, degraded bool) *rlsv3.RateLimitResponse {
	n := len(c.items)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	ptrs := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	limited := len(c.eng.Checks)
	var limits []rlsv3.RateLimitResponse_RateLimit
	var durs []durationpb.Duration
	if limited > 0 {
		limits = make([]rlsv3.RateLimitResponse_RateLimit, 0, limited)
		durs = make([]durationpb.Duration, 0, limited)
	}
	for i := range c.items {
		it := &c.items[i]
		st := &statuses[i]
		ptrs[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		if it.outcome == OutcomeLimited {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		r := c.ms[i].Rule
		if it.check < 0 {
			if r != nil && r.Unlimited {
				st.LimitRemaining = math.MaxUint32
			}
			continue
		}
		disp := display(r, it.d.Index)
		limits = append(limits, rlsv3.RateLimitResponse_RateLimit{
			Name:            r.Name,
			RequestsPerUnit: disp.RequestsPerUnit,
			Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(disp.Unit),
		})
		if disp.UnitMultiplier > 1 {
			limits[len(limits)-1].UnitMultiplier = wrapperspb.UInt32(disp.UnitMultiplier)
		}
		st.CurrentLimit = &limits[len(limits)-1]
		st.LimitRemaining = uint32(min(max(it.d.Remaining, 0), math.MaxUint32))
		// Whole seconds, rounded up, as envoyproxy/ratelimit answers: Envoy
		// reads only the seconds (its X-RateLimit-Reset), and a client told
		// to wait less than the truth retries too early.
		durs = append(durs, durationpb.Duration{Seconds: engine.CeilSeconds(c.eng.ResetAfter(it.check))})
		st.DurationUntilReset = &durs[len(durs)-1]
	}
	resp.Statuses = ptrs
	if s.opts.Headers != HeadersOff {
		resp.ResponseHeadersToAdd = s.headers(c, over)
	}
	var meta map[string]*structpb.Value
	if degraded {
		meta = map[string]*structpb.Value{MetadataDegraded: structpb.NewBoolValue(true)}
	}
	var violations []*structpb.Value
	enabled := false
	for i := range c.items {
		if r := c.ms[i].Rule; r != nil && r.QuotaMode && c.items[i].check >= 0 {
			enabled = true
			if c.items[i].outcome == OutcomeShadowLimited {
				violations = append(violations, structpb.NewNumberValue(float64(i)))
			}
		}
	}
	if enabled {
		if meta == nil {
			meta = map[string]*structpb.Value{}
		}
		meta[MetadataQuotaModeEnabled] = structpb.NewBoolValue(true)
		if len(violations) > 0 {
			meta[MetadataQuotaModeViolations] = structpb.NewListValue(&structpb.ListValue{Values: violations})
		}
	}
	if meta != nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: meta}
	}
	return resp
}

// display returns the display of limit i of r, or an empty one.
func display(r *descriptor.Rule, i int) descriptor.Display {
	if i >= 0 && i < len(r.Displays) {
		return r.Displays[i]
	}
	if len(r.Displays) > 0 {
		return r.Displays[0]
	}
	return descriptor.Display{}
}

// DeniedBody is the raw_body of the answer to a request refused for a deny
// list: Envoy sends it to the client, with the Content-Type the answer
// adds (application/problem+json), in its rate-limited response (status
// 429 unless the filter's rate_limited_status says otherwise; the protocol
// has no status of its own for a refusal).
const DeniedBody = `{"type":"about:blank","title":"Forbidden","detail":"The client is not allowed to use this service."}` + "\n"

// denied answers a request that carries a value on a deny list:
// OVER_LIMIT, with the descriptors that carry one OVER_LIMIT and the others
// OK, no limit, nothing counted and no rate-limit header (there is nothing
// to wait for).
func (s *Service) denied(c *call) *rlsv3.RateLimitResponse {
	n := len(c.items)
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	ptrs := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range c.items {
		st := &statuses[i]
		ptrs[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		if c.items[i].denied {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		ev := &c.events[i]
		ev.Hits, ev.Outcome = c.items[i].hits, OutcomeDenied
		if r := c.ms[i].Rule; r != nil {
			ev.Name = metricName(r)
		}
	}
	return &rlsv3.RateLimitResponse{
		OverallCode:          rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses:             ptrs,
		RawBody:              []byte(DeniedBody),
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Content-Type", Value: "application/problem+json"}},
	}
}
