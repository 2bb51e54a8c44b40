// Package wrappertest holds the wrapper conformance suite: every documented
// stack of store wrappers (the deny cache, fallback, the observer) keeps
// what the store underneath can do, on every store and topology. It has
// tests only.
package wrappertest
