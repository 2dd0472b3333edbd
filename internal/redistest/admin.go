package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared plumbing of the multi-process topologies (cluster, Sentinel):
// harness-side clients, bounded polling and reply parsing.

const (
	// topoPoll is the pause between two looks at a topology while waiting.
	topoPoll = 25 * time.Millisecond
	// adminCallTimeout bounds one harness query.
	adminCallTimeout = 2 * time.Second
)

// admins caches one harness client per address. Harness clients never
// retry and time out quickly, so that a dead or paused process shows up as
// an error in the next poll instead of stalling it.
type admins struct {
	mu      sync.Mutex
	clients map[string]*redis.Client
}

// get returns the harness client for addr, creating it on first use.
func (a *admins) get(addr string) *redis.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[addr]; ok {
		return c
	}
	if a.clients == nil {
		a.clients = map[string]*redis.Client{}
	}
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		DialTimeout:     300 * time.Millisecond,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
		MaxRetries:      -1,
		PoolSize:        4,
	})
	a.clients[addr] = c
	return c
}

// close closes every cached client.
func (a *admins) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.clients {
		c.Close()
	}
	a.clients = nil
}

// callCtx returns a context for one harness query.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), adminCallTimeout)
}

// waitFor calls check until it returns nil or timeout has passed, pausing
// topoPoll between calls. On timeout the error names what was awaited and
// the last state check reported.
func waitFor(timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("redistest: timed out after %v waiting for %s; last observed: %w", timeout, what, err)
		}
		time.Sleep(topoPoll)
	}
}

// parseInfo turns an INFO reply into a field map.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// roleInfo is the parsed reply of ROLE.
type roleInfo struct {
	role       string // "master", "slave" or "sentinel"
	masterPort int    // for a replica: the port it replicates from
	state      string // for a replica: "connect", "connecting", "sync", "connected"
}

// role asks the server at addr for its ROLE.
func role(c *redis.Client) (roleInfo, error) {
	ctx, cancel := callCtx()
	defer cancel()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return roleInfo{}, err
	}
	if len(v) == 0 {
		return roleInfo{}, fmt.Errorf("empty ROLE reply")
	}
	r := roleInfo{role: fmt.Sprint(v[0])}
	if r.role == "slave" && len(v) >= 4 {
		p, err := strconv.Atoi(fmt.Sprint(v[2]))
		if err != nil {
			return roleInfo{}, fmt.Errorf("bad ROLE reply %v", v)
		}
		r.masterPort = p
		r.state = fmt.Sprint(v[3])
	}
	return r, nil
}

// info runs INFO section on c and parses it.
func info(c *redis.Client, section string) (map[string]string, error) {
	ctx, cancel := callCtx()
	defer cancel()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// portOf returns the port of a "host:port" address, or 0.
func portOf(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0
	}
	p, _ := strconv.Atoi(addr[i+1:])
	return p
}

// serverByPort finds the server listening on port among servers.
func serverByPort(servers []*Server, port int) *Server {
	for _, s := range servers {
		if s.Port() == port {
			return s
		}
	}
	return nil
}
