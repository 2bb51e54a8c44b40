// Package validations counts the calls of algorithms.Rule.Validate, for
// the tests that check a decision on a resolved rule never validates it
// again (the rule was validated when the limiter or the rule was built).
// It is its own package, not part of algorithms/internal/registryhook,
// so that tests outside algorithms/ (package limiter's) can read it.
package validations

import "sync/atomic"

// Count is the number of rule validations so far in this process.
var Count atomic.Int64
