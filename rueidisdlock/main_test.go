package rueidisdlock_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A cluster client closes the connections of nodes that left its
	// slot map 5 s later, on a goroutine of its own that outlives the
	// client; after a MOVED (a slot that moved) it refreshes its slot map
	// once more about a second later, on a goroutine that sleeps until
	// then (DelayDo).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}
