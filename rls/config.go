package rls

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// File is one configuration file: its name (for error messages, usually its
// path) and its contents.
type File struct {
	Name string
	Data []byte
}

// DomainConfig is one parsed YAML file: a domain and its descriptor tree,
// as written. NewRules compiles DomainConfigs into Rules.
type DomainConfig struct {
	// File is the name the file was parsed under.
	File string
	// Domain is the file's domain, never empty.
	Domain string
	// Descriptors are the top-level descriptors.
	Descriptors []*Descriptor
}

// Descriptor is one node of a domain's descriptor tree.
type Descriptor struct {
	// Key is the descriptor entry's key, never empty.
	Key string
	// Value is the entry's value; empty matches any value of Key. It may
	// hold '*' wildcards, each matching any run of characters.
	Value string
	// Limits are the descriptor's limits: its rate_limit, then its
	// rate_limits, in order. Empty when the node only leads to others.
	Limits []Limit
	// Unlimited reports rate_limit: {unlimited: true}: a request matching
	// here is admitted at once, and counted nowhere.
	Unlimited bool
	// ShadowMode reports that the limits here are decided and counted but
	// never refuse a request.
	ShadowMode bool
	// DetailedMetric reports that statistics name the request's full key
	// (its values) instead of the rule's.
	DetailedMetric bool
	// ValueToMetric puts the request's value of this entry in the
	// statistics key of the limits below (the reference's value_to_metric).
	ValueToMetric bool
	// ShareThreshold makes every value matching this entry's wildcard
	// value count on one counter (the reference's share_threshold); only
	// for a value holding '*'.
	ShareThreshold bool
	// QuotaMode reports that the limits here refuse a request only when
	// every quota-mode limit of the request refuses it (the reference's
	// quota_mode).
	QuotaMode bool
	// Descriptors are the nested descriptors.
	Descriptors []*Descriptor
	// Line is the line of the descriptor in its file.
	Line int
}

// Limit is one rate limit of a descriptor.
type Limit struct {
	// Unit is the unit of time of RequestsPerUnit.
	Unit rlsv3.RateLimitResponse_RateLimit_Unit
	// RequestsPerUnit is the limit. 0 refuses every request, as in the
	// reference server.
	RequestsPerUnit uint32
	// UnitMultiplier makes the window UnitMultiplier units long; 0 is 1.
	UnitMultiplier uint32
	// Algorithm counts the limit; FixedWindow when not written.
	Algorithm algorithms.Name
	// OnFailure decides the limit while its store is unavailable; the
	// zero value defers to the service's default (WithFailurePolicy).
	OnFailure backend.FailurePolicy
	// Name names the limit for replaces.
	Name string
	// Replaces lists the names of limits this one replaces: when both
	// apply to one request, those are not checked.
	Replaces []string
	// Line is the line of the limit in its file.
	Line int
}

// Window returns the limit's window: its unit times its multiplier, with
// the reference server's lengths (a month is 30 days, a year 365). A
// window longer than a Duration holds is the longest Duration (and refused
// as longer than algorithms.MaxWindow), never a negative one.
func (l Limit) Window() time.Duration {
	unit, n := unitLength(l.Unit), time.Duration(max(l.UnitMultiplier, 1))
	if unit > 0 && n > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return unit * n
}

// unitLength returns the length of one unit, 0 for an unknown one.
func unitLength(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// ConfigError is a refused configuration: the file, the line (0 when not
// known), the place in the document, and what is wrong and what to change.
type ConfigError struct {
	File string
	Line int
	// Path is where in the document, like "descriptors[0].rate_limit.unit";
	// empty for the whole file.
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// Is reports whether target is ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// ErrConfig is wrapped by every error of ParseConfig and NewRules.
var ErrConfig = errors.New("rls: invalid configuration")
