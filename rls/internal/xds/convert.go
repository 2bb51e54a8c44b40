package xds

import (
	"errors"
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/limitkit/limitkit/rls"
)

// The YAML the reference's file format gives, written from a
// RateLimitConfig field by field as the reference converts one
// (config.ConfigXdsProtoToYaml), so that one parser and one compiler
// judge files and xDS alike.
type (
	yamlConfig struct {
		Domain      string           `yaml:"domain"`
		Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
	}
	yamlDescriptor struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value,omitempty"`
		RateLimit      *yamlLimit       `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
		QuotaMode      bool             `yaml:"quota_mode,omitempty"`
		Metadata       map[string]any   `yaml:"metadata,omitempty"`
	}
	yamlLimit struct {
		RequestsPerUnit uint32        `yaml:"requests_per_unit"`
		Unit            string        `yaml:"unit"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

// maxDepth bounds the descriptor nesting converted (far past any real
// configuration; the YAML it goes through must stay within the parser's
// own bound).
const maxDepth = 1000

// Files converts RateLimitConfigs to the files of the reference's YAML
// format, each named after its resource ("xds <name>"), in order.
func Files(configs []*rlsconfv3.RateLimitConfig) ([]rls.File, error) {
	files := make([]rls.File, 0, len(configs))
	for i, c := range configs {
		if c == nil {
			return nil, fmt.Errorf("resource %d is empty", i)
		}
		name := Name(c)
		ds, err := descriptors(c.GetDescriptors(), 1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		doc := yamlConfig{Domain: c.GetDomain(), Descriptors: ds}
		data, err := yaml.Marshal(&doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, rls.File{Name: name, Data: data})
	}
	return files, nil
}

// Name names a resource in errors, logs and /rlconfig: "xds " and its
// name, or its domain when it has no name.
func Name(c *rlsconfv3.RateLimitConfig) string {
	name := c.GetName()
	if name == "" {
		name = c.GetDomain()
	}
	return "xds " + name
}

func descriptors(pb []*rlsconfv3.RateLimitDescriptor, depth int) ([]yamlDescriptor, error) {
	if len(pb) == 0 {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("descriptors nested more than %d deep; flatten the tree", maxDepth)
	}
	out := make([]yamlDescriptor, 0, len(pb))
	for _, d := range pb {
		if d == nil {
			continue
		}
		children, err := descriptors(d.GetDescriptors(), depth+1)
		if err != nil {
			return nil, err
		}
		y := yamlDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), RateLimit: limit(d.GetRateLimit()),
			Descriptors: children,
			ShadowMode:  d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(), QuotaMode: d.GetQuotaMode(),
		}
		if m := d.GetMetadata(); m != nil && len(m.GetFields()) > 0 {
			y.Metadata = m.AsMap()
		}
		out = append(out, y)
	}
	return out, nil
}

func limit(pb *rlsconfv3.RateLimitPolicy) *yamlLimit {
	if pb == nil {
		return nil
	}
	l := &yamlLimit{RequestsPerUnit: pb.GetRequestsPerUnit(), Unit: pb.GetUnit().String(), Unlimited: pb.GetUnlimited(), Name: pb.GetName()}
	for _, r := range pb.GetReplaces() {
		l.Replaces = append(l.Replaces, yamlReplace{Name: r.GetName()})
	}
	return l
}

// Compile converts configs and compiles them with newRules, as files are
// compiled (rls.NewRules, or rls.NewMergedRules). An
// error names the resource and the place in it (descriptors[0].rate_limit,
// ...), without the line of the YAML it went through.
func Compile(configs []*rlsconfv3.RateLimitConfig, newRules func(...rls.File) (*rls.Rules, error)) (*rls.Rules, error) {
	files, err := Files(configs)
	if err != nil {
		return nil, err
	}
	rules, err := newRules(files...)
	if err != nil {
		var ce *rls.ConfigError
		if errors.As(err, &ce) {
			ce.Line = 0
		}
		return nil, err
	}
	return rules, nil
}
