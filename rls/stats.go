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
	// Hits is the request's cost for this limit (total_hits).
	Hits uint64
	// OverLimit, NearLimit, WithinLimit and ShadowMode count the hits as
	// the reference's counters of those names do: over_limit the hits
	// past the limit (all of them when the limit was already reached),
	// near_limit those between the near-limit threshold
	// (WithNearLimitRatio) and the limit, within_limit those admitted,
	// shadow_mode the hits past the limit that shadow mode admitted. A
	// Held limit counts none (nothing was consumed).
	OverLimit, NearLimit, WithinLimit, ShadowMode uint64
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
