package grpclimit

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
)

// methods is a set of method patterns: full methods and whole services.
type methods struct {
	full     map[string]struct{} // "/pkg.Svc/Method"
	services map[string]struct{} // "/pkg.Svc", from "/pkg.Svc/*"
	patterns []string            // as given, for Validate
}

// add parses patterns into the set.
func (m *methods) add(patterns []string) error {
	for _, p := range patterns {
		svc, method, err := parsePattern(p)
		if err != nil {
			return err
		}
		if method == "*" {
			if m.services == nil {
				m.services = map[string]struct{}{}
			}
			m.services["/"+svc] = struct{}{}
		} else {
			if m.full == nil {
				m.full = map[string]struct{}{}
			}
			m.full[p] = struct{}{}
		}
		m.patterns = append(m.patterns, p)
	}
	return nil
}

// parsePattern splits "/pkg.Svc/Method" or "/pkg.Svc/*".
func parsePattern(p string) (service, method string, err error) {
	if len(p) > 512 {
		return "", "", fmt.Errorf("method pattern of %d bytes; give \"/package.Service/Method\" or \"/package.Service/*\"", len(p))
	}
	rest, ok := strings.CutPrefix(p, "/")
	if ok {
		service, method, ok = strings.Cut(rest, "/")
	}
	if !ok || service == "" || method == "" || strings.ContainsAny(method, "/") ||
		strings.ContainsAny(service, "* \t") || (strings.Contains(method, "*") && method != "*") {
		return "", "", fmt.Errorf("method pattern %q: give a full method \"/package.Service/Method\" or a service \"/package.Service/*\"", p)
	}
	return service, method, nil
}

func (m *methods) empty() bool { return len(m.patterns) == 0 }

// matches reports whether the full method "/pkg.Svc/Method" is in the set.
func (m *methods) matches(fullMethod string) bool {
	if m.full != nil {
		if _, ok := m.full[fullMethod]; ok {
			return true
		}
	}
	if m.services != nil {
		if j := strings.LastIndexByte(fullMethod, '/'); j > 0 {
			if _, ok := m.services[fullMethod[:j]]; ok {
				return true
			}
		}
	}
	return false
}

// ServiceInfoProvider is what Validate reads the registered methods from;
// *grpc.Server is one.
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// ErrUnknownMethod is wrapped by Validate's error when a method pattern
// matches no registered method.
var ErrUnknownMethod = errors.New("grpclimit: method pattern matches no registered method")

// Validate reports the method patterns of WithMethods and WithoutMethods
// that match no method registered on s, so that a typo does not silently
// leave a method unlimited (or limit one meant to be exempt). Call it once
// the services are registered, before serving. The error wraps
// ErrUnknownMethod and names every such pattern.
func (i *Interceptor) Validate(s ServiceInfoProvider) error {
	if s == nil {
		return errors.New("grpclimit: Validate needs a server (a *grpc.Server) to read the registered methods from")
	}
	info := s.GetServiceInfo()
	var bad []string
	for _, p := range append(slices.Clip(i.only.patterns), i.exempt.patterns...) {
		svc, method, err := parsePattern(p)
		if err != nil {
			return fmt.Errorf("grpclimit: %w", err) // New already parsed it; kept for safety
		}
		si, ok := info[svc]
		if ok && method != "*" {
			ok = slices.ContainsFunc(si.Methods, func(m grpc.MethodInfo) bool { return m.Name == method })
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%q", p))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	services := make([]string, 0, len(info))
	for name := range info {
		services = append(services, name)
	}
	slices.Sort(services)
	if len(services) > 10 {
		services = append(services[:10], "...")
	}
	if len(bad) > 10 {
		bad = append(bad[:10], "...")
	}
	return fmt.Errorf("%w: %s; registered services: %s", ErrUnknownMethod, strings.Join(bad, ", "), strings.Join(services, ", "))
}
