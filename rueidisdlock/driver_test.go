package rueidisdlock_test

import (
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/drivertest"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/redis/rueidis"
)

// newClient returns a rueidis client made with opt, closed when t ends.
func newClient(t *testing.T, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// TestDriver runs the driver conformance suite on a single node, a
// Sentinel-managed primary and a cluster.
func TestDriver(t *testing.T) {
	t.Parallel() // servers of its own (drivertest), mostly waiting
	drivertest.Run(t,
		func(t *testing.T, addr string) driver.Driver {
			return rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: []string{addr}}))
		},
		drivertest.Sentinel(func(t *testing.T, master string, sentinels []string) driver.Driver {
			return rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{
				InitAddress: sentinels, Sentinel: rueidis.SentinelOption{MasterSet: master}}))
		}),
		drivertest.Cluster(func(t *testing.T, addrs []string) driver.Driver {
			return rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: addrs}))
		}),
	)
}

// TestDriverRESP2 runs the suite on a single node with a client that
// speaks RESP2, in which rueidis keeps pub/sub on a connection of its
// own.
func TestDriverRESP2(t *testing.T) {
	t.Parallel() // servers of its own (drivertest), mostly waiting
	drivertest.Run(t, func(t *testing.T, addr string) driver.Driver {
		return rueidisdlock.NewDriver(newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: true, DisableCache: true}))
	})
}
