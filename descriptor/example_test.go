package descriptor_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/memstore"
)

// A request's descriptors are matched one by one; ApplyReplaces then drops
// the limits another matched limit replaces, and each remaining rule's
// policy decides the request under the match's counter key.
func Example() {
	set, err := descriptor.New(descriptor.Domain{
		Name: "messaging",
		Descriptors: []descriptor.Descriptor{
			{Key: "message_type", Value: "marketing", Descriptors: []descriptor.Descriptor{
				{Key: "to_number", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 5, Unit: descriptor.Day}},
			}},
			{Key: "to_number", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 100, Unit: descriptor.Day}},
		},
	})
	if err != nil {
		panic(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()

	matches := []descriptor.Match{
		set.Match("messaging", []descriptor.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}}),
		set.Match("messaging", []descriptor.Entry{{Key: "to_number", Value: "2061111111"}}),
	}
	descriptor.ApplyReplaces(matches)
	for _, m := range matches {
		d, err := store.Take(context.Background(), m.Rule.Policy, m.Key, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (policy %s, key %s): allowed %v, %d of %d left\n",
			m.MetricName(), m.Rule.Policy.Name(), m.Key, d.Allowed, d.Remaining, m.Rule.Displays[0].RequestsPerUnit)
	}
	// Output:
	// messaging.message_type_marketing.to_number (policy messaging/message_type_marketing/to_number, key 2061111111): allowed true, 4 of 5 left
	// messaging.to_number (policy messaging/to_number, key 2061111111): allowed true, 99 of 100 left
}
