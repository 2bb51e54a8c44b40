// Package policydecode is the one decoding path of limiter.Config, shared
// by its UnmarshalJSON and by limiter/config's files, on configtree's
// tree. Package limiter owns the Config's fields and registers their
// decoding here (Config), so the list of fields is written once.
package policydecode

import (
	"fmt"
	"strings"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/suggest"
	"github.com/limitkit/limitkit/limiter/configtree"
)

// Config decodes a limiter.Config from the mapping n at path and returns
// it (as any, since limiter imports this package). Package limiter sets it
// in an init func.
var Config func(d configtree.Decoder, n *configtree.Node, path string) (any, error)

// FailurePolicy reads a backend.FailurePolicy ("local:4").
func FailurePolicy(d configtree.Decoder, n *configtree.Node, path string) (backend.FailurePolicy, error) {
	s, err := d.Str(n, path)
	if err != nil {
		return backend.FailurePolicy{}, err
	}
	p, err := backend.ParseFailurePolicy(s)
	if err != nil {
		name, _, _ := strings.Cut(s, ":")
		return p, &configtree.Error{Line: n.Line, Field: path, Err: fmt.Errorf("%w%s", err, suggest.DidYouMean(name, []string{"local", "fail_open", "fail_closed"}))}
	}
	return p, nil
}
