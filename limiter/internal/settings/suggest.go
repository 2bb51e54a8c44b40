package settings

import "github.com/limitkit/limitkit/internal/suggest"

// DidYouMean returns ` (did you mean "x"?)` for the option nearest to got,
// or "" when none is near (suggest.DidYouMean).
func DidYouMean(got string, options []string) string { return suggest.DidYouMean(got, options) }

// Nearest returns the option nearest to got, or "" (suggest.Nearest).
func Nearest(got string, options []string) string { return suggest.Nearest(got, options) }
