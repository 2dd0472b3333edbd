//go:build !unix

package main

// Environment variables that make TestMain run this test binary as
// something else than the tests (used on Unix only).
const (
	cliEnv    = "DLOCK_TEST_CLI"
	helperEnv = "DLOCK_TEST_HELPER"
)

// helperMain has no helpers to run here.
func helperMain(string, []string) int { return 2 }
