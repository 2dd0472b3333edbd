package rueidisdlock

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/rueidis"
)

// slotMap is a cluster's slot map as CLUSTER SLOTS tells it: which master
// serves which slot. rueidis keeps its own, but does not say which node a
// slot is on; NodeOf needs that to give a sharded channel the pub/sub
// connection of its node. It is read again when it is older than
// slotMapAge or Refresh marked it stale.
type slotMap struct {
	mu     sync.Mutex
	ranges []slotRange // sorted by first slot
	read   time.Time   // when ranges was read (zero: never, or stale)
}

// slotMapAge is how long a slot map is trusted without a Refresh.
const slotMapAge = 10 * time.Second

// slotRange is a range of slots and the address of its master.
type slotRange struct {
	first, last int
	addr        string
}

func (s *slotMap) invalidate() {
	s.mu.Lock()
	s.read = time.Time{}
	s.mu.Unlock()
}

// current returns the slot map, reading it when it is stale. The lock is
// not held while it is read: concurrent readers may each read it.
//
// A map read for a slot (-1: none) is asked of the node that served the
// slot in the map before. A slot's old master knows where it went: a
// migration's source is told before it ends the subscriptions of the
// slot's channels, and a demoted master follows its successor, while the
// other nodes, replicas most, may learn it a gossip round later (asked
// at random, they sent every other waiter of a moved slot through a
// lookup again). A node that does not answer (gone with a failover)
// leaves it to any node.
func (s *slotMap) current(ctx context.Context, client rueidis.Client, fresh bool, slot int) ([]slotRange, error) {
	s.mu.Lock()
	ranges, read := s.ranges, s.read
	s.mu.Unlock()
	if !fresh && !read.IsZero() && time.Since(read) < slotMapAge {
		return ranges, nil
	}
	ask := client
	if prev, ok := owner(ranges, slot); ok {
		if n := client.Nodes()[prev]; n != nil {
			ask = n
		}
	}
	at := time.Now()
	ranges, err := readSlots(ctx, ask)
	if err != nil && ask != client {
		ranges, err = readSlots(ctx, client)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if at.After(s.read) {
		s.ranges, s.read = ranges, at
	}
	s.mu.Unlock()
	return ranges, nil
}

// owner returns the address of slot's master in ranges.
func owner(ranges []slotRange, slot int) (string, bool) {
	i, found := slices.BinarySearchFunc(ranges, slot, func(r slotRange, slot int) int {
		switch {
		case r.last < slot:
			return -1
		case r.first > slot:
			return 1
		}
		return 0
	})
	if !found {
		return "", false
	}
	return ranges[i].addr, true
}

// masterOf returns the address of the master that serves slot.
func (s *slotMap) masterOf(ctx context.Context, client rueidis.Client, slot int) (string, error) {
	ranges, err := s.current(ctx, client, false, slot)
	if err != nil {
		return "", err
	}
	addr, ok := owner(ranges, slot)
	if !ok {
		return "", fmt.Errorf("rueidisdlock: no master serves slot %d", slot)
	}
	return addr, nil
}

// masters returns the addresses of the masters that serve slots, read
// afresh.
func (s *slotMap) masters(ctx context.Context, client rueidis.Client) ([]string, error) {
	ranges, err := s.current(ctx, client, true, -1)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range ranges {
		if !slices.Contains(out, r.addr) {
			out = append(out, r.addr)
		}
	}
	return out, nil
}

// readSlots reads CLUSTER SLOTS: [first, last, [ip, port, ...], replicas...].
func readSlots(ctx context.Context, client rueidis.Client) ([]slotRange, error) {
	r := reply(client.Do(queued(ctx), client.B().Arbitrary("CLUSTER", "SLOTS").Build()))
	entries, err := r.Slice()
	if err != nil {
		return nil, fmt.Errorf("rueidisdlock: CLUSTER SLOTS: %w", err)
	}
	out := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, ok := e.([]any)
		if !ok || len(f) < 3 {
			return nil, fmt.Errorf("rueidisdlock: CLUSTER SLOTS: bad entry %v", e)
		}
		node, ok := f[2].([]any)
		if !ok || len(node) < 2 {
			return nil, fmt.Errorf("rueidisdlock: CLUSTER SLOTS: bad node %v", f[2])
		}
		first, err1 := driver.Reply{Val: f[0]}.Int64()
		last, err2 := driver.Reply{Val: f[1]}.Int64()
		host, err3 := driver.Reply{Val: node[0]}.Text()
		port, err4 := driver.Reply{Val: node[1]}.Int64()
		if err := cmp.Or(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("rueidisdlock: CLUSTER SLOTS: %w", err)
		}
		out = append(out, slotRange{int(first), int(last), net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	slices.SortFunc(out, func(a, b slotRange) int { return a.first - b.first })
	return out, nil
}
