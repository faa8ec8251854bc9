package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// ErrPercent is what ParsePercent's errors wrap.
var ErrPercent = errors.New("config: invalid percentage")

// maxPercentDecimals bounds the digits after a percentage's point: enough
// for one key in a million (0.0001%).
const maxPercentDecimals = 4

// ParsePercent returns the percentage s holds: a decimal number from 0 to
// 100 with at most 4 digits after its point, followed by "%" or not ("25%",
// "25", "0.5%" and "100%"; "0.5" is half a percent, not half). Signs,
// exponents, spaces and anything else are refused, with an error wrapping
// ErrPercent.
func ParsePercent(s string) (float64, error) {
	num, _ := strings.CutSuffix(s, "%")
	intPart, frac, hasPoint := strings.Cut(num, ".")
	if !digits(intPart) || (hasPoint && !digits(frac)) {
		return 0, fmt.Errorf("%w: want a percentage such as 25%% or 0.5%%, got %q", ErrPercent, s)
	}
	if len(frac) > maxPercentDecimals {
		return 0, fmt.Errorf("%w: %q has more than %d digits after the point", ErrPercent, s, maxPercentDecimals)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v > 100 {
		return 0, fmt.Errorf("%w: want 0%% to 100%%, got %q", ErrPercent, s)
	}
	return v, nil
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) <= 20
}

// rollout decodes an enforce field: the share of keys a limit is enforced
// on (see ParsePercent).
func (d *decoder) rollout(n *yaml.Node, path string) *sluice.Rollout {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.add(n, path, "want a percentage of keys such as 25%%, got %s", found(n))
		return nil
	}
	v, err := ParsePercent(n.Value)
	if err != nil {
		d.add(n, path, "%s", strings.TrimPrefix(err.Error(), ErrPercent.Error()+": "))
		return nil
	}
	return &sluice.Rollout{Percent: v}
}
