package httplimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// A rule's tiers keep separate counters: policies of the same name share
// state, so each tier's policy is named "<rule>#<tier>". A key that used up
// the premium tier still has the default limit's request, and the other way
// round.
func TestTiersKeepSeparateCounters(t *testing.T) {
	rule := httplimit.Rule{
		Name:  "search",
		Key:   []httplimit.KeyPart{httplimit.Header("X-API-Key")},
		Limit: limit(sluice.FixedWindow, 1, time.Hour),
		Tiers: map[string]sluice.Limit{"premium": limit(sluice.FixedWindow, 3, time.Hour)},
	}
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rule}, Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan")}})
	prem := req{target: "/", header: map[string]string{"X-API-Key": "k", "X-Plan": "premium"}}
	free := req{target: "/", header: map[string]string{"X-API-Key": "k"}}
	eq(t, "premium", strings.Join(intStrings(e.statuses(4, prem)), ","), "200,200,200,429")
	eq(t, "the same key without a tier", strings.Join(intStrings(e.statuses(2, free)), ","), "200,429")
	eq(t, "premium again", strings.Join(intStrings(e.statuses(1, prem)), ","), "429")
}
