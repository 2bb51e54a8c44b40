// Package option applies the functional options of limitkit's packages, so
// that every constructor treats them alike: each public package declares
//
//	type Option func(*options) error
//
// over an unexported options struct, and its constructors call Apply. An
// option that refuses its argument returns an error naming itself and
// saying what to change ("WithTimeout: the timeout is -1s; give a positive
// duration"); the constructor prefixes its package ("fallback: ").
package option

// Apply applies opts to o in order and returns the first error, as the
// option returned it. A nil option is skipped, so that callers may build
// option lists with optional entries.
func Apply[T any, O ~func(*T) error](o *T, opts []O) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}
