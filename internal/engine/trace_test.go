package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/engine"
)

// spanLog is a Tracer that writes down the spans it is asked for, nested
// by context, with their attributes.
type spanLog struct{ lines []string }

type depthKey struct{}

type logSpan struct {
	l     *spanLog
	i     int
	attrs []string
}

func (l *spanLog) Start(ctx context.Context, name string) (context.Context, engine.Span) {
	depth, _ := ctx.Value(depthKey{}).(int)
	l.lines = append(l.lines, strings.Repeat("  ", depth)+name)
	return context.WithValue(ctx, depthKey{}, depth+1), &logSpan{l: l, i: len(l.lines) - 1}
}

func (s *logSpan) SetStrings(key string, values ...string) {
	s.attrs = append(s.attrs, fmt.Sprintf("%s=%s", key, strings.Join(values, ",")))
}

func (s *logSpan) End(err error) {
	if len(s.attrs) > 0 {
		s.l.lines[s.i] += " " + strings.Join(s.attrs, " ")
	}
	if err != nil {
		s.l.lines[s.i] += " error"
	}
}

// A decision is one span with its rules, outcomes and verdict, and each
// store call one span under it; no key appears.
func TestTracer(t *testing.T) {
	s, _ := newStore(t)
	api := policy(t, "api", sluice.GCRA, 1)
	shadow := policy(t, "shadow", sluice.GCRA, 5)
	var log spanLog
	e := engine.New(s, engine.Options{Tracer: &log})
	decide := func() {
		var c engine.Call
		c.Add(engine.Check{Policy: api, Key: "secret-key", Cost: 1, Name: "api"})
		c.Add(engine.Check{Policy: shadow, Key: "secret-key", Cost: 1, Name: "shadow", Mode: engine.Shadow})
		if _, err := e.Decide(context.Background(), &c); err != nil {
			t.Fatal(err)
		}
	}
	decide()
	decide()
	want := []string{
		"sluice.decide sluice.rules=api,shadow sluice.outcomes=allowed,allowed sluice.verdict=admitted",
		"  sluice.store.take_all sluice.rule=api",
		"  sluice.store.take sluice.rule=shadow",
		"sluice.decide sluice.rules=api,shadow sluice.outcomes=limited,skipped sluice.verdict=refused",
		"  sluice.store.take_all sluice.rule=api",
	}
	if got := strings.Join(log.lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("spans:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
