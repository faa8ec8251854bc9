package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server"
)

// Rule paths match regardless of case by default: an upstream that routes
// /LOGIN to /login (as Express and ASP.NET do) cannot be reached around a
// /login rule, and the "path" key part is one counter for every spelling.
// CaseSensitivePaths restores exact matching for upstreams that tell them
// apart.
func TestGatewayPathCase(t *testing.T) {
	rules := []httplimit.Rule{
		{Name: "login", Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{"POST"}}, Limit: fixed(2, time.Hour)},
		{Name: "per-path", Match: httplimit.Match{Paths: []string{"/API/*"}}, Key: []httplimit.KeyPart{httplimit.Path()}, Limit: fixed(2, time.Hour)},
	}
	statuses := func(g *running, method string, paths ...string) string {
		t.Helper()
		s := ""
		for _, p := range paths {
			s += fmt.Sprint(get(t, method, g.url+p, nil).StatusCode, " ")
		}
		return s
	}
	g := start(t, server.Options{Limiter: httplimit.Options{Rules: rules}})
	if got, want := statuses(g, "POST", "/login", "/LOGIN", "/Login/", "/lOgIn"), "200 200 429 429 "; got != want {
		t.Errorf("insensitive /login: statuses %q, want %q", got, want)
	}
	if got, want := statuses(g, "GET", "/api/items", "/API/ITEMS", "/Api/Items", "/api/other"), "200 200 429 200 "; got != want {
		t.Errorf("insensitive path key: statuses %q, want %q", got, want)
	}

	g = start(t, server.Options{Limiter: httplimit.Options{Rules: rules, CaseSensitivePaths: true}})
	if got, want := statuses(g, "POST", "/login", "/LOGIN", "/LOGIN", "/LOGIN", "/login", "/login"), "200 200 200 200 200 429 "; got != want {
		t.Errorf("sensitive /login: statuses %q, want %q", got, want)
	}
	if got, want := statuses(g, "GET", "/API/items", "/API/ITEMS", "/API/items", "/API/items"), "200 200 200 429 "; got != want {
		t.Errorf("sensitive path key: statuses %q, want %q", got, want)
	}
}
