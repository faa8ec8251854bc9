package rls

import (
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/problem"
)

// maxJSONBody bounds the body of a POST /json request.
const maxJSONBody = 1 << 20

// JSONHandler returns the handler of envoyproxy/ratelimit's POST /json
// endpoint: the body is a RateLimitRequest and the answer a
// RateLimitResponse, both in the protobuf JSON mapping. The status is 200
// when the request is OK, 429 when it is OVER_LIMIT, 400 (with a plain-text
// message) for a body that is not a valid request, 503 when the store
// failed, and 405 for a method other than POST. A body that does not arrive
// within the listener's read timeout gets 408 and one over 1 MiB 413, as
// on the gateway, each with an application/problem+json document.
func JSONHandler(d Decider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "rls: POST a RateLimitRequest in JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			problem.Body(w, err, maxJSONBody, "rls: reading the body: "+err.Error())
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "rls: invalid request: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := d.Decide(r.Context(), &req)
		if err != nil {
			code := http.StatusInternalServerError
			switch {
			case errors.Is(err, ErrInvalidRequest):
				code = http.StatusBadRequest
			case errors.Is(err, ErrStore):
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "rls: encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		code := http.StatusOK
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			code = http.StatusTooManyRequests
		}
		w.WriteHeader(code)
		_, _ = w.Write(out)
	})
}
