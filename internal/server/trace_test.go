package server_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/server"
)

// otlpReceiver is an in-process OTLP/HTTP collector: it keeps the spans
// posted to /v1/traces.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("the exporter posted %s to %s", r.Header.Get("Content-Type"), r.URL.Path)
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("the export does not parse: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func attr(s *tracepb.Span, key string) []string {
	for _, kv := range s.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			return []string{v.StringValue}
		case *commonpb.AnyValue_ArrayValue:
			var out []string
			for _, x := range v.ArrayValue.Values {
				out = append(out, x.GetStringValue())
			}
			return out
		}
	}
	return nil
}

// A traced request's spans reach an OTLP receiver: the request's, under
// the caller's trace; its decision, with the rules, outcomes and verdict;
// and the store call, with the backend. No span carries the key.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	rc := newReceiver(t)
	o := serviceOptions(t)
	o.Tracing = &server.TracingOptions{Endpoint: rc.URL, SampleRatio: 1}
	r, g := startGW(t, o)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parent := "00-" + traceID + "-00f067aa0ba902b7-01"
	for range 3 { // the third is refused (limit 2)
		get(t, "GET", r.url+"/api", map[string]string{"X-API-Key": "k-secret-client", "traceparent": parent})
	}
	// The service continues the trace of the gRPC metadata.
	conn, err := grpc.NewClient(g.Addr(server.ListenerGRPC).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", parent)
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "svc-secret"}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil { // Close flushes the spans
		t.Fatal(err)
	}

	rc.mu.Lock()
	defer rc.mu.Unlock()
	byName := map[string][]*tracepb.Span{}
	for _, s := range rc.spans {
		byName[s.Name] = append(byName[s.Name], s)
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "secret") {
				t.Errorf("span %s carries the key in %s", s.Name, kv.Key)
			}
		}
	}
	if len(byName["sluice.request"]) != 3 || len(byName["sluice.decide"]) != 4 || len(byName["sluice.store.take_all"]) != 4 {
		t.Fatalf("spans by name: request %d, decide %d, take_all %d; want 3, 4 (one for the service), 4",
			len(byName["sluice.request"]), len(byName["sluice.decide"]), len(byName["sluice.store.take_all"]))
	}
	reqs := map[string]*tracepb.Span{}
	for _, s := range byName["sluice.request"] {
		if got := hex.EncodeToString(s.TraceId); got != traceID {
			t.Errorf("request span in trace %s, want the caller's %s", got, traceID)
		}
		if hex.EncodeToString(s.ParentSpanId) != "00f067aa0ba902b7" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("request span: parent %x, kind %v; want the caller's span, server", s.ParentSpanId, s.Kind)
		}
		reqs[string(s.SpanId)] = s
	}
	var verdicts []string
	decides := map[string]*tracepb.Span{}
	for _, s := range byName["sluice.decide"] {
		decides[string(s.SpanId)] = s
		if attr(s, "sluice.rules")[0] == "api" {
			if reqs[string(s.ParentSpanId)] == nil {
				t.Errorf("the decision's span is not under a request's")
			}
			verdicts = append(verdicts, attr(s, "sluice.verdict")[0])
			if s.StartTimeUnixNano > s.EndTimeUnixNano {
				t.Errorf("decision span ends before it starts")
			}
		} else if got := strings.Join(attr(s, "sluice.rules"), ","); got != "api.client" || hex.EncodeToString(s.TraceId) != traceID {
			t.Errorf("the service's decision names %q in trace %x, want api.client in the caller's", got, s.TraceId)
		}
	}
	slices.Sort(verdicts)
	if got := strings.Join(verdicts, ","); got != "admitted,admitted,refused" {
		t.Errorf("verdicts %s, want admitted twice and refused", got)
	}
	for _, s := range byName["sluice.store.take_all"] {
		if decides[string(s.ParentSpanId)] == nil {
			t.Errorf("a store span is not under a decision")
		}
		if got := attr(s, "sluice.store"); len(got) != 1 || got[0] != "memory" {
			t.Errorf("store span's sluice.store = %v, want memory", got)
		}
	}
}
