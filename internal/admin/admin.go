// Package admin is the gateway's admin API, served on the admin listener
// under /admin/v1/ when the config file turns it on: look at a key's state
// without charging it, reset it, and manage per-client overrides. Every
// request needs the bearer token from admin.token_file (the GET routes
// take instead the session cookie a browser gets for the token, for the
// dashboard); errors are
// application/problem+json documents (RFC 9457).
//
// Routes:
//
//	GET    /admin/v1/clients            the overrides in force
//	GET    /admin/v1/clients/{client}   one client's override
//	PUT    /admin/v1/clients/{client}   set a client's override, replacing it
//	PATCH  /admin/v1/clients/{client}   change part of it (tier, limits, until)
//	DELETE /admin/v1/clients/{client}   remove it
//	POST   /admin/v1/keys/show          a key's or a request's state, uncharged
//	POST   /admin/v1/keys/reset         forget a key, or a request's keys
//
// and, for the rate-limit service, over one descriptor of a domain:
//
//	POST   /admin/v1/descriptors/show            a descriptor's state, uncharged
//	POST   /admin/v1/descriptors/reset           forget its counter
//	GET    /admin/v1/descriptors/overrides       the descriptor overrides in force
//	GET    /admin/v1/descriptors/overrides/{id}  one, by ID (such as api/client=a)
//	PUT    /admin/v1/descriptors/overrides/{id}  give a descriptor limits of its own
//	DELETE /admin/v1/descriptors/overrides/{id}  remove them
//
// and, to see who is limited:
//
//	GET    /admin/v1/top         each rule's keys most limited (or with the most requests)
//	GET    /admin/v1/overview    each rule's decisions a second by outcome, its top keys, the store's health
//	GET    /admin/v1/dashboard   the same, live in a browser page (asks for the token)
//	POST   /admin/v1/session     open a dashboard session: a cookie for the GET routes
package admin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/internal/rls"
)

// MaxBody is the largest request body the API reads, in bytes.
const MaxBody = 64 << 10

// State is what the API works on, from the configuration in force.
type State struct {
	Limiter *httplimit.Limiter
	// Service is the rate-limit service; nil when none runs.
	Service *rls.Service
	// Token is the bearer token the API requires; empty turns the API off.
	Token []byte
}

// Options configure the API's handler.
type Options struct {
	// State returns the configuration in force; each API request calls it
	// once. Required.
	State func() State
	// Overrides holds the per-client overrides. Required.
	Overrides *overrides.Clients
	// Descriptors holds the descriptor overrides of the rate-limit
	// service; required when a State has a Service.
	Descriptors *overrides.Descriptors
	// Observed is what the server saw of its traffic: the rules' heavy
	// hitters and rates.
	Observed Observed
	// Logger receives a line for every change made through the API.
	// Default slog.Default().
	Logger *slog.Logger
}

type api struct {
	opts Options
	log  *slog.Logger
}

// Handler returns the API's handler, to mount at /admin/ on the admin
// listener.
func Handler(opts Options) http.Handler {
	a := &api{opts: opts, log: opts.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	mux := http.NewServeMux()
	a.clientRoutes().register(mux)
	mux.HandleFunc("POST /admin/v1/keys/show", a.with(a.showKey))
	mux.HandleFunc("POST /admin/v1/keys/reset", a.with(a.resetKey))
	mux.HandleFunc("POST /admin/v1/descriptors/show", a.with(a.showDescriptor))
	mux.HandleFunc("POST /admin/v1/descriptors/reset", a.with(a.resetDescriptor))
	a.descriptorRoutes().register(mux)
	mux.HandleFunc("GET /admin/v1/top", a.with(a.getTop))
	mux.HandleFunc("GET /admin/v1/overview", a.with(a.getOverview))
	mux.HandleFunc("GET /admin/v1/dashboard", a.getDashboard)
	mux.HandleFunc("POST /admin/v1/session", a.with(a.postSession))
	mux.HandleFunc("/admin/", a.with(func(w http.ResponseWriter, r *http.Request, _ State) {
		problem.Write(w, http.StatusNotFound, "no such route: see the routes in docs/operations.md, The admin API")
	}))
	return mux
}

// with checks the token, then calls h with the state in force.
func (a *api) with(h func(http.ResponseWriter, *http.Request, State)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := a.opts.State()
		if len(st.Token) == 0 {
			problem.Write(w, http.StatusNotFound, "the admin API is off: set admin.api: true and admin.token_file in the config file")
			return
		}
		if !authorized(r, st.Token, r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			problem.Write(w, http.StatusUnauthorized, "a valid bearer token is required (Authorization: Bearer <the content of admin.token_file>)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		h(w, r, st)
	}
}

// authorized reports whether r carries token as its bearer token or, if
// session, the dashboard's session cookie that token opened.
func authorized(r *http.Request, token []byte, session bool) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), token) == 1 {
		return true
	}
	return session && hasSession(r, token)
}

// decode reads a JSON body into v, refusing unknown fields, trailing data
// (400), bodies over MaxBody (413) and bodies that do not arrive within the
// listener's read timeout (408); it answers the problem itself and returns
// false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON value")
	}
	if err != nil {
		problem.Body(w, err, MaxBody, "the body is not the JSON expected: "+err.Error())
		return false
	}
	return true
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
