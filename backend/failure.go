package backend

import (
	"fmt"
	"strconv"
	"strings"
)

// FailurePolicy says how a request is decided while the store that should
// decide it is unavailable. Package fallback applies it; the zero value
// leaves the choice to the fallback store's own policy.
//
// In configuration files it is written "local" (this instance's full
// limit), "local:N" (a share of the limit, one of N instances),
// "fail_open" or "fail_closed".
type FailurePolicy struct {
	mode      FailureMode
	instances int64
}

// FailureMode is the kind of a FailurePolicy.
type FailureMode uint8

// The kinds of failure policy.
const (
	// ModeUnset defers to the fallback store's own policy.
	ModeUnset FailureMode = iota
	// ModeLocal decides on an in-process store with a share of the limit.
	ModeLocal
	// ModeOpen admits.
	ModeOpen
	// ModeClosed denies.
	ModeClosed
)

// LocalPolicy decides on an in-process store with the limit divided among
// instances: ceil(limit/instances), at least 1. Instances below 1 count as 1.
func LocalPolicy(instances int) FailurePolicy {
	return FailurePolicy{mode: ModeLocal, instances: int64(max(instances, 1))}
}

// The policies that need no local state.
var (
	// FailOpen admits every request the primary cannot decide.
	FailOpen = FailurePolicy{mode: ModeOpen}
	// FailClosed denies every request the primary cannot decide.
	FailClosed = FailurePolicy{mode: ModeClosed}
)

// Mode returns the policy's kind.
func (p FailurePolicy) Mode() FailureMode { return p.mode }

// Instances returns the number of instances sharing the limit under a
// ModeLocal policy (1 for the others).
func (p FailurePolicy) Instances() int64 { return max(p.instances, 1) }

// String names the policy as configuration files write it; "" when unset.
func (p FailurePolicy) String() string {
	switch p.mode {
	case ModeLocal:
		if p.Instances() == 1 {
			return "local"
		}
		return "local:" + strconv.FormatInt(p.instances, 10)
	case ModeOpen:
		return "fail_open"
	case ModeClosed:
		return "fail_closed"
	}
	return ""
}

// ParseFailurePolicy reads a policy as String writes it. "" is the unset
// policy.
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch s {
	case "":
		return FailurePolicy{}, nil
	case "local":
		return LocalPolicy(1), nil
	case "fail_open":
		return FailOpen, nil
	case "fail_closed":
		return FailClosed, nil
	}
	if n, ok := strings.CutPrefix(s, "local:"); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 1 {
			return LocalPolicy(v), nil
		}
	}
	return FailurePolicy{}, fmt.Errorf("failure policy %q: write \"local\", \"local:N\" (N instances share the limit, N >= 1), \"fail_open\" or \"fail_closed\"", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p FailurePolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *FailurePolicy) UnmarshalText(b []byte) error {
	v, err := ParseFailurePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// OnShortAck says what a Redis store with replica acknowledgement (the
// stores' WithReplicaAck) does with an admission that fewer replicas
// acknowledged in time than it asked for.
type OnShortAck uint8

// The policies for admissions too few replicas acknowledged.
const (
	// DenyUnconfirmed gives the units back and denies the request, with
	// Result.Unconfirmed set and RetryAfter the wait's timeout: an
	// admission is reported only once replicas hold it.
	DenyUnconfirmed OnShortAck = iota
	// AdmitUnconfirmed admits the request with Result.Unconfirmed set.
	AdmitUnconfirmed
)
