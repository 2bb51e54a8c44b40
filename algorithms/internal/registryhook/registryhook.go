// Package registryhook lets the module's tests add a test-only algorithm
// to the registry of package algorithms, whose register is unexported (a
// step works on the opaque algorithms.State, so no code outside that
// package can write one; a test copies a built-in's steps under a name of
// its own). algorithms/internal/algtest uses it to show that a new registry
// row is picked up with no other edit.
//
// It lives under algorithms/internal, not in the dev wing (internal/dev),
// because package algorithms imports it and shipped code imports nothing
// of the dev wing; Go's internal rule keeps every package outside
// algorithms/ from adding a row.
package registryhook

// Register adds a, an *algorithms.Algorithm, to the registry, after the
// built-in ones; package algorithms sets it when it is initialised. Call
// it from an init function of a test package: the registry is read
// without locks, and the scripts are built from it at first use. The
// error wraps algorithms.ErrInvalidRule when a is not an *Algorithm, lacks
// a field, or takes a name, key suffix or salt already taken.
var Register func(a any) error
