// Package problem writes the error bodies of Sluice's HTTP endpoints:
// RFC 9457 problem documents (application/problem+json). It also says which
// status answers a request body that could not be read, so that every
// listener answers a slow body 408 and an oversized one 413 alike.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
)

// Write answers status with a problem document of type about:blank, the
// status's text as its title and detail as its detail. It sets
// Content-Type, Content-Length and Cache-Control: no-store; the caller may
// have set other headers before.
func Write(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail}) // strings and an int: never fails
	b = append(b, '\n')
	h := w.Header()
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// BodyStatus returns the status that answers err, a failure to read or
// parse a request's body: 413 Content Too Large when http.MaxBytesReader
// cut the body off, 408 Request Timeout when it did not arrive within the
// server's read timeout, and 400 Bad Request for anything else (a body
// that broke off, or that does not parse).
func BodyStatus(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case timedOut(err):
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}

// timedOut reports whether err is a connection's read deadline's, such as
// http.Server's ReadTimeout.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// Body answers err, a failure to read or parse a request's body of at most
// limit bytes, with the status BodyStatus gives. A 413's detail states the
// limit; a 408's says that the body did not arrive in time, and the
// connection is closed (its read deadline has passed, so it could not
// carry another request); a 400's detail is detail.
func Body(w http.ResponseWriter, err error, limit int64, detail string) {
	switch status := BodyStatus(err); status {
	case http.StatusRequestEntityTooLarge:
		Write(w, status, fmt.Sprintf("the body is larger than %d bytes", limit))
	case http.StatusRequestTimeout:
		w.Header().Set("Connection", "close")
		Write(w, status, "the request body did not arrive in time")
	default:
		Write(w, status, detail)
	}
}

// TypeUnavailable is the problem type of a 503 answered while the server's
// capacity is reduced for a while, through no fault of the client's
// ("temporary-reduced-capacity", registered by
// draft-ietf-httpapi-ratelimit-headers).
const TypeUnavailable = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

// Unavailable answers 503 Service Unavailable with Retry-After: secs (at
// least 1) and a problem document of type TypeUnavailable whose detail is
// detail followed by "; retry after N second(s).", and whose retry_after
// member is N. It sets Content-Type, Content-Length and Cache-Control:
// no-store; the caller may have set other headers before.
func Unavailable(w http.ResponseWriter, secs int64, detail string) {
	secs = max(secs, 1)
	d, _ := json.Marshal(detail) // a string: never fails
	b := make([]byte, 0, 160+len(d))
	b = append(b, `{"type":"`+TypeUnavailable+`","title":"Service Unavailable","status":503,"detail":`...)
	b = append(b, d[:len(d)-1]...)
	b = append(b, "; retry after "...)
	b = strconv.AppendInt(b, secs, 10)
	if secs == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, "}\n"...)
	h := w.Header()
	h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(b)
}
