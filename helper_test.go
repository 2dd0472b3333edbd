package dlock_test

// helperEnv, when set, makes the test binary a helper process (a lock
// holder or contender in a test about several processes) instead of
// running tests. Its value is the helper's mode.
const helperEnv = "DLOCK_TEST_HELPER"

func helperMain(mode string) int {
	return 2
}
