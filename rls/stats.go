package rls

// Stat is one limit's part in one decision, for metrics (the reference
// server's ratelimit_service_rate_limit_* counters).
type Stat struct {
	// Domain is the request's domain.
	Domain string
	// Key names the rule: the domain and the config's path of keys and
	// values ("domain.key_value.key"); for a detailed_metric rule, the
	// request's full key ("domain.key_value.key_value"), within the
	// bound of WithMaxStatKeys.
	Key string
	// Outcome is what the limit decided.
	Outcome Outcome
	// Hits is the request's cost for this limit.
	Hits uint64
}

// Outcome is a limit's decision in a Stat.
type Outcome uint8

// The outcomes.
const (
	// Within: admitted, below the near-limit ratio.
	Within Outcome = iota
	// Near: admitted, past the near-limit ratio (WithNearLimitRatio).
	Near
	// Over: refused.
	Over
	// Shadow: would have refused, admitted because the limit (or the
	// service) is in shadow mode. Metrics count it as over_limit and
	// shadow_mode.
	Shadow
	// Held: this limit admitted but another refused the request, so
	// nothing was consumed (a request is all or nothing).
	Held
)

// String names the outcome as the reference server's metrics do.
func (o Outcome) String() string {
	switch o {
	case Within:
		return "within_limit"
	case Near:
		return "near_limit"
	case Over:
		return "over_limit"
	case Shadow:
		return "shadow_mode"
	case Held:
		return "held"
	}
	return "unknown"
}
