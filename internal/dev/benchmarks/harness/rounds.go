package harness

import (
	"flag"
	"fmt"
	"slices"
	"time"
)

// The defaults of a run, the steady state a published figure needs: 3
// rounds (tables give medians over them), each Redis cell measured 2 s
// after a warm-up of its own load for 1 s.
const (
	DefaultRounds   = 3
	DefaultMeasured = 2 * time.Second
	DefaultWarmup   = time.Second
)

// Shortfall says how a run of rounds rounds, each cell measured for
// measured, falls short of the steady state a published figure needs
// (DefaultRounds rounds or more, DefaultMeasured or more per cell), or
// returns "" when it does not: a smoke run's figures show the tool works,
// not how fast anything is.
func Shortfall(rounds int, measured time.Duration) string {
	if rounds >= DefaultRounds && measured >= DefaultMeasured {
		return ""
	}
	return fmt.Sprintf("%d round(s) of %v per cell: a smoke run; published figures need at least %d rounds of %v", rounds, measured, DefaultRounds, DefaultMeasured)
}

// Rotate returns xs rotated left by round's share of its length (round is
// one of rounds, from 0): round 0 keeps the list's order, each later round
// starts further down the list. Running each round's cells in this order
// interleaves the contenders, so a noisy moment of the machine does not
// fall on the same neighbours every round.
func Rotate[T any](xs []T, round, rounds int) []T {
	if len(xs) == 0 {
		return xs
	}
	k := round * len(xs) / max(rounds, 1) % len(xs)
	if k == 0 && round > 0 {
		k = round % len(xs)
	}
	return append(slices.Clone(xs[k:]), xs[:k]...)
}

// SetUnset gives the flags of fs that the command line did not set the
// values of values (flag name → value): how -quick turns a tool's
// defaults into a smoke run's while the flags given explicitly win. Call
// it after fs.Parse.
func SetUnset(fs *flag.FlagSet, values map[string]string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range values {
		if set[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return err
		}
	}
	return nil
}
