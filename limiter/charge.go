package limiter

import (
	"context"
	"errors"

	"github.com/limitkit/limitkit/algorithms"
)

// ChargeN is a placeholder for the tokens-core branch's ChargeN (replaced
// at the merge).
func (l *Limiter) ChargeN(ctx context.Context, key string, n int64) (Decision, error) {
	return Decision{}, errors.New("limiter: charges need the tokens-core merge")
}

func checkCharge(algorithms.Rule) error { return nil }
