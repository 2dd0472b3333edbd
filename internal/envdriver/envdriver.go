// Package envdriver lets dlock's own test suites run on the driver that
// the environment names: DLOCK_TEST_DRIVER=rueidis or valkey-go (unset,
// or go-redis: go-redis, as before). The suites make go-redis clients;
// New builds the dlock Client on a client of the named library that
// connects where the go-redis client does (its address, or a cluster's
// addresses, credentials and database), made once per go-redis client
// and closed by Forget.
//
// A Sentinel failover client is followed once its sentinels are named
// (SentinelOf: go-redis does not tell them). A go-redis client that
// cannot be followed (a wrapper of a client, as fault-injecting tests
// use) keeps go-redis: New then says so once on stderr, and Used reports
// it.
package envdriver

import (
	"fmt"
	"github.com/dlock-go/dlock/driver"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/dlock-go/dlock/valkeydlock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// Env is the environment variable that names the driver.
const Env = "DLOCK_TEST_DRIVER"

// Name returns the driver the environment names: "go-redis" (the
// default), "rueidis" or "valkey-go". It panics on any other value.
func Name() string {
	switch v := os.Getenv(Env); v {
	case "", "go-redis":
		return "go-redis"
	case "rueidis", "valkey-go":
		return v
	default:
		panic(fmt.Sprintf("envdriver: %s=%q: want go-redis, rueidis or valkey-go", Env, v))
	}
}

// shadow is the client of the named library made for a go-redis client.
type shadow struct {
	d     driver.Driver
	close func()
}

var (
	mu        sync.Mutex
	shadows   = map[dlock.Redis]*shadow{}
	sentinels = map[dlock.Redis]sentinel{} // failover clients' sentinels (SentinelOf)
	kept      = map[string]bool{}          // kinds of clients left on go-redis, said once
)

// sentinel is where a failover client finds its master.
type sentinel struct {
	master string
	addrs  []string
}

// SentinelOf tells that rdb, a go-redis failover client, finds the master
// named master through the sentinels at addrs.
func SentinelOf(rdb dlock.Redis, master string, addrs []string) {
	mu.Lock()
	defer mu.Unlock()
	sentinels[rdb] = sentinel{master, addrs}
}

// New is dlock.New(rdb, opts...) on the driver that the environment
// names.
func New(rdb dlock.Redis, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := Driver(rdb)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return dlock.New(rdb, opts...)
	}
	return dlock.NewWithDriver(d, opts...)
}

// Driver returns the driver that the environment names for rdb: nil for
// go-redis (rdb itself, through dlock.New), or the driver of a client of
// the named library, made on first use.
func Driver(rdb dlock.Redis) (driver.Driver, error) {
	name := Name()
	if name == "go-redis" || rdb == nil {
		return nil, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if s := shadows[rdb]; s != nil {
		return s.d, nil
	}
	addrs, o, ok := target(rdb)
	if st, found := sentinels[rdb]; found {
		addrs, o.master, ok = st.addrs, st.master, true
	}
	if !ok {
		kind := fmt.Sprintf("%T", rdb)
		if !kept[kind] {
			kept[kind] = true
			fmt.Fprintf(os.Stderr, "envdriver: %s=%s: a %s stays on go-redis\n", Env, name, kind)
		}
		return nil, nil
	}
	s, err := open(name, addrs, o)
	if err != nil {
		return nil, err
	}
	shadows[rdb] = s
	return s.d, nil
}

// Used reports whether a client of the named library serves rdb.
func Used(rdb dlock.Redis) bool {
	mu.Lock()
	defer mu.Unlock()
	return shadows[rdb] != nil
}

// Forget closes the client made for rdb, if any: after the dlock Clients
// on it are closed, when rdb is.
func Forget(rdb dlock.Redis) {
	mu.Lock()
	s := shadows[rdb]
	delete(shadows, rdb)
	delete(sentinels, rdb)
	mu.Unlock()
	if s != nil {
		s.close()
	}
}

// options is what the shadow takes over from go-redis's options.
type options struct {
	username, password string
	db                 int
	dialTimeout        time.Duration
	readTimeout        time.Duration
	resp2              bool
	master             string // addrs are sentinels monitoring this master
}

// target returns where rdb connects, if it can be told.
func target(rdb dlock.Redis) ([]string, options, bool) {
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		opts := options{o.Username, o.Password, o.DB, o.DialTimeout, o.ReadTimeout, o.Protocol == 2, ""}
		if o.Addr == "FailoverClient" || o.Dialer != nil && o.Addr == "" {
			return nil, opts, false
		}
		return []string{o.Addr}, opts, true
	case *redis.ClusterClient:
		o := c.Options()
		return o.Addrs, options{o.Username, o.Password, 0, o.DialTimeout, o.ReadTimeout, o.Protocol == 2, ""}, true
	}
	return nil, options{}, false
}

// open makes a client of the named library.
func open(name string, addrs []string, o options) (*shadow, error) {
	// A go-redis ReadTimeout that a test set (not go-redis's default of
	// 3 s) is how long a reply may take: rueidis's ConnWriteTimeout is the
	// nearest (it closes a connection whose replies do not come in time).
	var writeTimeout time.Duration
	if o.readTimeout > 0 && o.readTimeout != 3*time.Second {
		writeTimeout = o.readTimeout
	}
	switch name {
	case "rueidis":
		opt := rueidis.ClientOption{InitAddress: addrs, Username: o.username, Password: o.password,
			SelectDB: o.db, AlwaysRESP2: o.resp2, DisableCache: o.resp2, ConnWriteTimeout: writeTimeout}
		opt.Dialer.Timeout = o.dialTimeout
		opt.Sentinel.MasterSet = o.master
		client, err := whileLoading(func() (rueidis.Client, error) { return rueidis.NewClient(opt) })
		if err != nil {
			return nil, fmt.Errorf("envdriver: rueidis.NewClient(%v): %w", addrs, err)
		}
		return &shadow{rueidisdlock.NewDriver(client), client.Close}, nil
	case "valkey-go":
		opt := valkey.ClientOption{InitAddress: addrs, Username: o.username, Password: o.password,
			SelectDB: o.db, AlwaysRESP2: o.resp2, DisableCache: o.resp2, ConnWriteTimeout: writeTimeout}
		opt.Dialer.Timeout = o.dialTimeout
		opt.Sentinel.MasterSet = o.master
		client, err := whileLoading(func() (valkey.Client, error) { return valkey.NewClient(opt) })
		if err != nil {
			return nil, fmt.Errorf("envdriver: valkey.NewClient(%v): %w", addrs, err)
		}
		return &shadow{valkeydlock.NewDriver(client), client.Close}, nil
	}
	return nil, fmt.Errorf("envdriver: no driver %q", name)
}

// NewWrapped is New with the driver wrapped by wrap (a test's recorder or
// fault injector at the driver seam) when the environment names a driver
// other than go-redis; with go-redis it is dlock.New(rdb, opts...), and
// the test's go-redis hooks see the traffic.
func NewWrapped(rdb dlock.Redis, wrap func(driver.Driver) driver.Driver, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := Driver(rdb)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return dlock.New(rdb, opts...)
	}
	return dlock.NewWithDriver(wrap(d), opts...)
}

// loadingWait bounds how long whileLoading waits out a server loading its
// data.
const loadingWait = 30 * time.Second

// whileLoading makes a client with mk, again while the server answers
// LOADING (it is loading its data after a restart), for loadingWait at
// most. rueidis and valkey-go dial when their client is made, where
// go-redis dials at the first call (which waits out LOADING: it is an
// error go-redis retries), so a Client made on them beside a restart
// failed where one on go-redis did not (the torture test's respawned
// worker, seed 91114821; TestNewWaitsOutLoading).
func whileLoading[C any](mk func() (C, error)) (C, error) {
	deadline := time.Now().Add(loadingWait)
	for {
		c, err := mk()
		if err == nil || !strings.Contains(err.Error(), "LOADING") || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(20 * time.Millisecond) // a server loading its data: no signal to wait on
	}
}
