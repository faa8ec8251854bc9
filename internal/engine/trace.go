package engine

import "context"

// Tracer traces decisions and the store calls they make, for a service to
// export (Sluice's server sends them over OTLP); the engine names the
// spans and gives their attributes, which never carry a key. A nil Tracer
// traces nothing, at the cost of a nil check per store call.
//
// The spans: SpanDecide for one request's decision, with AttrRules (the
// checks' names), AttrOutcomes (each check's outcome) and AttrVerdict;
// under it one span per store call, named SpanStore and the operation
// (such as sluice.store.take_all), with AttrRule, the check's name (the
// first check's for a batch).
type Tracer interface {
	// Start starts the span name as a child of ctx's span, and returns the
	// context that carries it.
	Start(ctx context.Context, name string) (context.Context, Span)
}

// Span is one operation being traced.
type Span interface {
	// SetStrings sets the attribute key to values: one value for a
	// string attribute, or a list.
	SetStrings(key string, values ...string)
	// End ends the span; err, if not nil, marks it failed.
	End(err error)
}

// The spans' names and attributes.
const (
	SpanDecide   = "sluice.decide"
	SpanStore    = "sluice.store."
	AttrRules    = "sluice.rules"
	AttrOutcomes = "sluice.outcomes"
	AttrVerdict  = "sluice.verdict"
	AttrRule     = "sluice.rule"
)

// The store operations, as span names.
const (
	spanPeek    = SpanStore + "peek"
	spanReserve = SpanStore + "reserve"
	spanTakeAll = SpanStore + "take_all"
	spanTake    = SpanStore + "take"
	spanCancel  = SpanStore + "cancel"
)

// String returns the verdict's name: admitted, refused or unavailable.
func (v Verdict) String() string {
	switch v {
	case Admitted:
		return "admitted"
	case Refused:
		return "refused"
	}
	return "unavailable"
}

// String returns the outcome's name, such as shadow_limited.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Limited:
		return "limited"
	case Delayed:
		return "delayed"
	case ShadowLimited:
		return "shadow_limited"
	case Skipped:
		return "skipped"
	}
	return "error"
}

// storeSpan starts the span of a store call for the check named rule;
// with no Tracer it returns ctx and nil.
func (e *Engine) storeSpan(ctx context.Context, name, rule string) (context.Context, Span) {
	if e.opts.Tracer == nil {
		return ctx, nil
	}
	ctx, s := e.opts.Tracer.Start(ctx, name)
	s.SetStrings(AttrRule, rule)
	return ctx, s
}

// end ends s, if there is one.
func end(s Span, err error) {
	if s != nil {
		s.End(err)
	}
}

// traceDecision starts the span of c's decision; the function returned
// ends it with the verdict. With no Tracer it returns ctx and nil.
func (e *Engine) traceDecision(ctx context.Context, c *Call) (context.Context, func(Verdict, error)) {
	if e.opts.Tracer == nil {
		return ctx, nil
	}
	ctx, s := e.opts.Tracer.Start(ctx, SpanDecide)
	return ctx, func(v Verdict, err error) {
		names := make([]string, len(c.Checks))
		outs := make([]string, len(c.Checks))
		for i := range c.Checks {
			names[i], outs[i] = c.Checks[i].Name, c.Results[i].Outcome.String()
		}
		s.SetStrings(AttrRules, names...)
		s.SetStrings(AttrOutcomes, outs...)
		s.SetStrings(AttrVerdict, v.String())
		s.End(err)
	}
}
