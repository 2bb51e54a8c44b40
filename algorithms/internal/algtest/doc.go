// Package algtest shows that adding an algorithm takes its files and one
// registry entry: its test registers test-only algorithms (from a _test.go
// file, through algorithms/internal/registryhook) and checks that the
// conformance suite, the model test, the Lua-vs-Go differential test and the docs check
// pick them up with no other edit. It sits beside the hook, under
// algorithms/internal, as Go's internal rule requires.
package algtest
