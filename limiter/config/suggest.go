package config

import "github.com/limitkit/limitkit/limiter/internal/settings"

// didYouMean suggests a valid name for a misspelt one; it is settings', so
// that every message of a file suggests alike.
func didYouMean(got string, options []string) string { return settings.DidYouMean(got, options) }

// clip bounds s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
