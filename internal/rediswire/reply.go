package rediswire

import (
	"errors"
	"fmt"

	"github.com/limitkit/limitkit/algorithms"
)

// ErrBadReply reports a script reply the runner cannot trust: not an array
// of four integers, or integers out of range. Errors wrap it.
var ErrBadReply = errors.New("malformed reply from a Redis script")

// Decode checks a script's reply for one request of rule and converts it:
// exactly ReplyLen integers, allowed 0 or 1, remaining in
// 0..limit, retry-after and reset-after in 0..2^53, retry-after 0 when
// allowed, the record point >= 0. Anything else is an error wrapping
// ErrBadReply.
func Decode(rule algorithms.Rule, reply []int64) (algorithms.Outcome, error) {
	if len(reply) != ReplyLen {
		return algorithms.Outcome{}, fmt.Errorf("%w: %d integers, want %d", ErrBadReply, len(reply), ReplyLen)
	}
	if at := reply[ReplyAt]; at < 0 || at > algorithms.MaxLimit {
		return algorithms.Outcome{}, fmt.Errorf("%w: record point %d is out of range", ErrBadReply, at)
	}
	return decodeOutcome(rule, reply)
}

// decodeOutcome checks and converts the four integers of one outcome.
func decodeOutcome(rule algorithms.Rule, reply []int64) (algorithms.Outcome, error) {
	allowed, remaining := reply[ReplyAllowed], reply[ReplyRemaining]
	retry, reset := reply[ReplyRetryAfter], reply[ReplyResetAfter]
	switch {
	case allowed != 0 && allowed != 1:
		return algorithms.Outcome{}, fmt.Errorf("%w: allowed is %d, want 0 or 1", ErrBadReply, allowed)
	case remaining < 0 || remaining > rule.Limit:
		return algorithms.Outcome{}, fmt.Errorf("%w: remaining %d is outside 0..%d", ErrBadReply, remaining, rule.Limit)
	case retry < 0 || retry > algorithms.MaxLimit || (allowed == 1 && retry != 0):
		return algorithms.Outcome{}, fmt.Errorf("%w: retry-after %d ms is out of range (allowed %d)", ErrBadReply, retry, allowed)
	case reset < 0 || reset > algorithms.MaxLimit:
		return algorithms.Outcome{}, fmt.Errorf("%w: reset-after %d ms is out of range", ErrBadReply, reset)
	}
	return algorithms.Outcome{Allowed: allowed == 1, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}, nil
}
