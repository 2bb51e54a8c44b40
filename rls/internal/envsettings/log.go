package envsettings

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseLevel reads LOG_LEVEL with the reference's (logrus) names: trace
// and debug are slog's Debug, info, warn or warning, and error, fatal and
// panic are Error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning", "":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("LOG_LEVEL=%q: write debug, info, warn or error", clip(s))
}

// Logger returns the structured logger the settings ask for, writing to w:
// text or JSON at LOG_LEVEL.
func (s *Settings) Logger(w io.Writer) *slog.Logger {
	level, _ := ParseLevel(s.LogLevel) // checked by Load
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
