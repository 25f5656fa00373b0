// Package docfigures holds no code, only a test: it keeps the figures that docs/benchmarks.md,
// docs/chaos.md, docs/fencing.md and docs/choosing.md quote from the runs recorded in
// docs/bench/*.json equal to those files, rounded as the docs print them, so that a figure edited
// by hand, or a JSON file replaced by a new run, fails `go test` until the other follows.
package docfigures
