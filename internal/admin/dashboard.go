package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// The dashboard's pages, built into the binary: no build step, and
// nothing fetched from elsewhere when they load.
var (
	//go:embed dashboard.html
	dashboardPage []byte
	//go:embed login.html
	loginPage []byte
)

// sessionCookie names the cookie of a dashboard session.
const sessionCookie = "sluice_admin_session"

// session returns the value of the session cookie that token opens: an
// HMAC of the token, so that the cookie never holds the token, and a new
// token (after a reload) ends every session.
func session(token []byte) string {
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte("sluice dashboard session"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// hasSession reports whether r carries the session cookie of token.
func hasSession(r *http.Request, token []byte) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(session(token))) == 1
}

// postSession answers POST /admin/v1/session, which the token guards:
// it opens a session for the browser, a cookie the admin listener alone
// reads (Path /admin/, HttpOnly, SameSite Strict), good for the GET
// routes only, until the browser closes or the token changes.
func (a *api) postSession(w http.ResponseWriter, r *http.Request, st State) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: session(st.Token), Path: "/admin/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// getDashboard answers GET /admin/v1/dashboard: the dashboard for a
// browser with a session (or the token), else the page that asks for the
// token.
func (a *api) getDashboard(w http.ResponseWriter, r *http.Request) {
	st := a.opts.State()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The pages load nothing from elsewhere, and no other site may frame
	// them.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	if len(st.Token) == 0 {
		a.with(nil)(w, r) // the API is off: its problem document
		return
	}
	if !authorized(r, st.Token, true) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(loginPage)
		return
	}
	_, _ = w.Write(dashboardPage)
}
