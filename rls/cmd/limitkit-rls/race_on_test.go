//go:build race

package main

// raceDetector reports a build with the race detector, which makes each
// 1 MB request of TestMetricsBoundedInBytes some 100 ms (protobuf checks
// every byte of a string, instrumented).
const raceDetector = true
