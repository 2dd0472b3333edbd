// Package bench compares dlock with the Go Redis locks people use today:
// go-redsync/redsync, bsm/redislock and rueidis' rueidislock.
//
// It is a module of its own, so that the library never depends on the
// anchors. Everything lives in test files: Go benchmarks against one
// redis-server that the test binary starts, and a report (TestReport,
// enabled by -report) that runs them all and prints markdown tables with
// ratios and a verdict per performance target. README.md says how to run
// them and shows the figures of one run.
package bench
