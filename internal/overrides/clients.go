package overrides

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
)

// Client is one client's override: the kind of entry of Clients, by
// client.
type Client struct {
	Client string `json:"client"`
	// Tier, if not empty, is the client's tier.
	Tier string `json:"tier,omitempty"`
	// Limits are the client's own limits, by rule name.
	Limits map[string]Limit `json:"limits,omitempty"`
	// Until, if not zero, is when the override ends.
	Until time.Time `json:"until,omitzero"`
	// Anchor, if not empty, is the client's billing anchor, such as
	// "15T09:00" (see calendar.ParseAnchor): the calendar quotas that
	// decide its requests start their periods there.
	Anchor string `json:"anchor,omitempty"`

	co *httplimit.ClientOverride // set by compile
}

// Override converts e for httplimit, validating its anchor and limits.
func (e Client) Override() (httplimit.Override, error) {
	o := httplimit.Override{Tier: e.Tier}
	if e.Anchor != "" {
		a, err := calendar.ParseAnchor(e.Anchor)
		if err != nil {
			return o, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		o.Anchor = &a
	}
	if len(e.Limits) > MaxRules {
		return o, fmt.Errorf("%w: %d rules with limits of their own, at most %d", ErrInvalid, len(e.Limits), MaxRules)
	}
	if len(e.Limits) > 0 {
		o.Limits = make(map[string]sluice.Limit, len(e.Limits))
	}
	for rule, l := range e.Limits {
		lim, err := l.limit()
		if err != nil {
			return o, fmt.Errorf("%w: rule %q: %w", ErrInvalid, rule, err)
		}
		o.Limits[rule] = lim
	}
	return o, nil
}

// Validate checks e on its own (Set.Put also checks that Until is ahead
// of now).
func (e Client) Validate() error {
	_, err := e.check()
	return err
}

func (e Client) check() (httplimit.Override, error) {
	switch {
	case e.Client == "" || len(e.Client) > MaxClientLen:
		return httplimit.Override{}, fmt.Errorf("%w: the client must be 1 to %d bytes", ErrInvalid, MaxClientLen)
	case !utf8.ValidString(e.Client) || strings.ContainsFunc(e.Client, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return httplimit.Override{}, fmt.Errorf("%w: the client must be UTF-8 without control characters", ErrInvalid)
	case e.Tier == "" && len(e.Limits) == 0 && e.Anchor == "":
		return httplimit.Override{}, fmt.Errorf("%w: give a tier, limits or an anchor", ErrInvalid)
	}
	return e.Override()
}

func (e Client) compile(store sluice.Store) (Client, error) {
	o, err := e.check()
	if err != nil {
		return Client{}, err
	}
	if e.co, err = httplimit.NewClientOverride(store, e.Client, o); err != nil {
		return Client{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return e, nil
}

func (e Client) id() string      { return e.Client }
func (e Client) key() string     { return e.Client }
func (e Client) ends() time.Time { return e.Until }

// Clients is the gateway's per-client overrides: a Set of Client entries,
// whose IDs and keys are the clients, which the gateway looks up for every
// request that matches a rule.
type Clients struct{ Set[Client] }

var _ httplimit.Overrides = (*Clients)(nil)

// NewClients returns the per-client overrides of opts.Store.
func NewClients(opts Options) (*Clients, error) {
	c := new(Clients)
	if err := c.init(opts, kind{noun: "client"}); err != nil {
		return nil, err
	}
	return c, nil
}

// Override implements httplimit.Overrides: the client's override, or nil
// if it has none in force. It costs an atomic load and a map lookup.
func (c *Clients) Override(client string) *httplimit.ClientOverride {
	if it := c.snap.Load().m[client]; it != nil && inForce(it.until, c.opts.Now) {
		return it.e.co
	}
	return nil
}
