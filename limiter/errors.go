package limiter

import (
	"errors"
	"fmt"
	"strings"

	"github.com/limitkit/limitkit/algorithms"
)

// badInput is an error of bad input (a Config, a call) reported by this
// package. Its text is "limiter: " and what to change, like every error of
// the package; it wraps kind, ErrInvalidConfig or ErrInvalidRequest, for
// errors.Is, without printing that sentinel's module-wide text.
type badInput struct {
	kind  error
	msg   string
	cause error // what the message restates, or nil
}

func (e *badInput) Error() string { return "limiter: " + e.msg }

// Unwrap returns the kind and the cause, for errors.Is and errors.As.
func (e *badInput) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// invalidf returns an error of kind whose message is format with args (as
// fmt.Errorf, %w included).
func invalidf(kind error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &badInput{kind: kind, msg: err.Error(), cause: errors.Unwrap(err)}
}

// restate returns err, a lower layer's error of bad input (algorithms,
// backend), as this package's error of kind. The lower layers write
// "<their sentinel>: what to change"; the message keeps what to change.
func restate(kind, err error) error {
	var b *badInput
	if errors.As(err, &b) {
		return err
	}
	msg := err.Error()
	for _, s := range []error{algorithms.ErrInvalidRule, algorithms.ErrInvalidRequest} {
		if rest, ok := strings.CutPrefix(msg, s.Error()+": "); ok {
			msg = rest
			break
		}
	}
	return &badInput{kind: kind, msg: msg, cause: err}
}

// within puts context (such as "limit 2") before the message of err, an
// error of this package.
func within(err error, context string) error {
	var b *badInput
	if !errors.As(err, &b) {
		return fmt.Errorf("limiter: %s: %w", context, err)
	}
	return &badInput{kind: b.kind, msg: context + ": " + b.msg, cause: b.cause}
}
