// Package bench compares dlock with the Go Redis locks people use today:
// go-redsync/redsync, bsm/redislock and rueidis' rueidislock.
//
// It is a module of its own, so that the library never depends on the
// anchors. Everything lives in test files: Go benchmarks against
// redis-servers that the test binary starts (one shared server, 5
// independent masters for RedLock, a cluster), and a report (TestReport,
// enabled by -report) that runs them all and prints markdown tables with
// ratios and a verdict per performance target. BenchmarkOneClient (and
// TestOneClientReport, enabled by -oneclient) measures what one process
// sees with one client of each implementation shared by all goroutines,
// with client and server CPU per operation. README.md says how to run
// them and shows the figures of one run.
package bench
