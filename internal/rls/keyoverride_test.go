package rls

import (
	"context"
	"errors"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
)

// keyOverrides is a fixed set of descriptor overrides.
type keyOverrides map[string]descriptor.Match

func (k keyOverrides) Override(domain string, es []descriptor.Entry) (descriptor.Match, bool) {
	if len(es) != 1 {
		return descriptor.Match{}, false
	}
	m, ok := k[domain+"|"+es[0].Key+"="+es[0].Value]
	return m, ok
}

func keyOverride(t *testing.T, domain, key, value string, limits ...sluice.Limit) (string, descriptor.Match) {
	t.Helper()
	m, err := descriptor.KeyOverride(domain, []descriptor.Entry{{Key: key, Value: value}}, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return domain + "|" + key + "=" + value, m
}

// An operator's override of one descriptor applies in place of the tree's
// limit, of a shadow mode and of the descriptor's own limit, on a counter
// of its own.
func TestKeyOverrides(t *testing.T) {
	ov := keyOverrides{}
	five := sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: 3600e9}
	for _, kv := range [][3]string{{"test", "remote_address", "a"}, {"test", "shadowed", "s"}, {"other", "remote_address", "a"}} {
		k, m := keyOverride(t, kv[0], kv[1], kv[2], five)
		ov[k] = m
	}
	h := start(t, Options{Overrides: ov})
	for range 5 {
		wantCodes(t, h.call(t, request(desc("remote_address", "a"))), ok, ok)
	}
	resp := h.call(t, request(desc("remote_address", "a")))
	wantCodes(t, resp, over, over)
	if l := resp.Statuses[0].CurrentLimit; l == nil || l.RequestsPerUnit != 5 || l.Unit != 3 {
		t.Errorf("current_limit %v, want 5/HOUR", l)
	}
	if got := h.obs.last(t).Descriptors[0].Name; got != "test.admin_override" {
		t.Errorf("metric name %q, want test.admin_override", got)
	}
	// Another value keeps the tree's 3 a minute.
	for range 3 {
		wantCodes(t, h.call(t, request(desc("remote_address", "b"))), ok, ok)
	}
	wantCodes(t, h.call(t, request(desc("remote_address", "b"))), over, over)
	// The override wins over the descriptor's own limit.
	d := desc("remote_address", "a")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_HOUR}
	wantCodes(t, h.call(t, request(d)), over, over)
	// A shadow-mode rule's descriptor, overridden, is enforced.
	for range 5 {
		wantCodes(t, h.call(t, request(desc("shadowed", "s"))), ok, ok)
	}
	wantCodes(t, h.call(t, request(desc("shadowed", "s"))), over, over)
	// A domain the tree does not know matches nothing, override or not.
	other := request(desc("remote_address", "a"))
	other.Domain = "other"
	if resp := h.call(t, other); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("an override in an unknown domain: %v, want OK with no limit", resp)
	}

	// Peek and Reset see the override's counter.
	ctx := context.Background()
	ks, err := h.svc.PeekDescriptor(ctx, "test", []descriptor.Entry{{Key: "remote_address", Value: "a"}})
	if err != nil || !ks.Override || ks.Decision.Allowed || ks.Decision.Remaining != 0 {
		t.Errorf("PeekDescriptor = %+v, %v; want the exhausted override", ks, err)
	}
	if _, err := h.svc.ResetDescriptor(ctx, "test", []descriptor.Entry{{Key: "remote_address", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	wantCodes(t, h.call(t, request(desc("remote_address", "a"))), ok, ok)
	if _, err := h.svc.PeekDescriptor(ctx, "nope", []descriptor.Entry{{Key: "k", Value: "v"}}); !errors.Is(err, ErrUnknownDomain) {
		t.Errorf("PeekDescriptor in an unknown domain: %v, want ErrUnknownDomain", err)
	}
	if _, err := h.svc.PeekDescriptor(ctx, "test", nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("PeekDescriptor without entries: %v, want ErrInvalidRequest", err)
	}
}
