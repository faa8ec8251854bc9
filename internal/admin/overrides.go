package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/problem"
)

// overrideRoutes serve the routes over one kind of override: GET of the
// list and of one override, PUT (and PATCH, where the kind has it) to set
// one, DELETE to remove one. The kinds differ only in their names and in
// how a request becomes the override to store.
type overrideRoutes[E overrides.Entry[E]] struct {
	a   *api
	set *overrides.Set[E] // nil when the kind is off
	// root is the path of the list, such as /admin/v1/clients; param is
	// the wildcard below it that names one override, which spans the
	// rest of the path if rest is set. PATCH is served beside PUT if patch
	// is set.
	root, param string
	rest, patch bool
	// noun names what an override is of, in problems and log lines, and
	// the log attribute that names it: "client", "descriptor".
	noun string
	// list names the list in the document GET on root answers: "clients",
	// "overrides".
	list string
	// on answers a problem and returns false when the kind is off in st;
	// nil when it never is.
	on func(http.ResponseWriter, State) bool
	// read reads a PUT (patch false) or PATCH request on the override id
	// into the override to store, and returns with it what answers the
	// override as stored (nil: the override itself); or it answers a
	// problem and returns ok false.
	read func(w http.ResponseWriter, r *http.Request, st State, id string, patch bool) (e E, answer func(E) any, ok bool)
	// logged returns the attributes a log line gives an override that was
	// set.
	logged func(E) []any
}

// register adds the routes to mux.
func (o *overrideRoutes[E]) register(mux *http.ServeMux) {
	one := o.root + "/{" + o.param + "}"
	if o.rest {
		one = o.root + "/{" + o.param + "...}"
	}
	mux.HandleFunc("GET "+o.root, o.with(o.handleList))
	mux.HandleFunc("GET "+one, o.with(o.handleGet))
	mux.HandleFunc("PUT "+one, o.with(func(w http.ResponseWriter, r *http.Request, st State) { o.handleSet(w, r, st, false) }))
	if o.patch {
		mux.HandleFunc("PATCH "+one, o.with(func(w http.ResponseWriter, r *http.Request, st State) { o.handleSet(w, r, st, true) }))
	}
	mux.HandleFunc("DELETE "+one, o.with(o.handleDelete))
}

// with is api.with, and then answers the problem of a kind that is off.
func (o *overrideRoutes[E]) with(h func(http.ResponseWriter, *http.Request, State)) http.HandlerFunc {
	return o.a.with(func(w http.ResponseWriter, r *http.Request, st State) {
		if o.on == nil || o.on(w, st) {
			h(w, r, st)
		}
	})
}

func (o *overrideRoutes[E]) handleList(w http.ResponseWriter, r *http.Request, st State) {
	reply(w, http.StatusOK, map[string][]E{o.list: o.set.List()})
}

func (o *overrideRoutes[E]) handleGet(w http.ResponseWriter, r *http.Request, st State) {
	id := r.PathValue(o.param)
	e, ok := o.set.Get(id)
	if !ok {
		problem.Write(w, http.StatusNotFound, fmt.Sprintf("%s %q has no override", o.noun, id))
		return
	}
	reply(w, http.StatusOK, e)
}

func (o *overrideRoutes[E]) handleSet(w http.ResponseWriter, r *http.Request, st State, patch bool) {
	e, answer, ok := o.read(w, r, st, r.PathValue(o.param), patch)
	if !ok {
		return
	}
	got, err := o.set.Put(r.Context(), e)
	switch {
	case errors.Is(err, overrides.ErrInvalid):
		problem.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), overrides.ErrInvalid.Error()+": "))
		return
	case errors.Is(err, overrides.ErrFull):
		problem.Write(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		problem.Write(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	o.a.log.Info("admin API: "+o.noun+" override set", o.logged(got)...)
	if answer == nil {
		reply(w, http.StatusOK, got)
		return
	}
	reply(w, http.StatusOK, answer(got))
}

func (o *overrideRoutes[E]) handleDelete(w http.ResponseWriter, r *http.Request, st State) {
	id := r.PathValue(o.param)
	ok, err := o.set.Delete(r.Context(), id)
	switch {
	case errors.Is(err, overrides.ErrInvalid):
		problem.Write(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), overrides.ErrInvalid.Error()+": "))
	case err != nil:
		problem.Write(w, http.StatusServiceUnavailable, err.Error())
	case !ok:
		problem.Write(w, http.StatusNotFound, fmt.Sprintf("%s %q has no override", o.noun, id))
	default:
		o.a.log.Info("admin API: "+o.noun+" override removed", o.noun, digest(id))
		w.WriteHeader(http.StatusNoContent)
	}
}
