package rls

import (
	"context"
	"errors"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/accesslist"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/memstore"
)

// FuzzDecide feeds arbitrary requests, in the protobuf JSON mapping as
// POST /json receives them and in the binary form gRPC receives, to the
// service: it must answer or refuse with ErrInvalidRequest, never panic,
// and answer one status per descriptor.
func FuzzDecide(f *testing.F) {
	for _, seed := range []string{
		`{"domain":"test","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}],"hitsAddend":0},{"entries":[{"key":"team","value":"x"}]}],"hitsAddend":2}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"remote_address","value":"a"}],"limit":{"requestsPerUnit":1,"unit":"HOUR"}}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"u"},{"key":"plan","value":"free"}],"hitsAddend":"1000000000000"}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"blocked","value":"x"}]},{"entries":[{"key":"shadowed","value":"x"}]},{"entries":[{"key":"tier","value":"vip"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"multi","value":"k"}],"limit":{"requestsPerUnit":0,"unit":"SECOND","unitMultiplier":1}}]}`,
		`{"domain":"","descriptors":[]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"","value":""}],"isNegativeHits":true}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"team","value":"partner"}]},{"entries":[{"key":"remote_address","value":"6.6.6.6"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"team","value":"partner"}],"limit":{"requestsPerUnit":1,"unit":"HOUR"}}]}`,
	} {
		f.Add([]byte(seed), false)
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal([]byte(seed), &req); err != nil {
			f.Fatalf("seed %s: %v", seed, err)
		}
		b, _ := proto.Marshal(&req)
		f.Add(b, true)
	}
	st := memstore.New(memstore.Options{})
	defer st.Close()
	rules, err := newSet(f, testConfig).WithLists(
		descriptor.List{Name: "bad", Key: "remote_address", Deny: true, Values: accesslist.NewKeySet([]string{"6.6.6.6"})},
		descriptor.List{Name: "partners", Key: "team", Values: accesslist.NewKeySet([]string{"partner"})})
	if err != nil {
		f.Fatal(err)
	}
	svc, err := New(Options{Store: st, Rules: rules, MaxDescriptors: 8, MaxEntries: 8})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		var req rlsv3.RateLimitRequest
		unmarshal := protojson.Unmarshal
		if binary {
			unmarshal = proto.Unmarshal
		}
		if unmarshal(data, &req) != nil {
			return
		}
		resp, err := svc.Decide(context.Background(), &req)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("response does not marshal: %v", err)
		}
	})
}
