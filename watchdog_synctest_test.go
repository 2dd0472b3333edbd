package dlock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/redis/go-redis/v9"
)

// scriptServer is an in-memory stand-in for Redis that knows only the
// replies of dlock's mutex scripts: every acquire succeeds, every renewal
// and release too. It is no proof of behaviour (the real-server tests are);
// it lets the watchdog's schedule run over virtual time, where a real
// server's clock cannot follow.
type scriptServer struct {
	mu     sync.Mutex
	renews int
}

func (s *scriptServer) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "EVALSHA":
			switch args[1] {
			case protocol.LockScript.SHA:
				reply = "*2\r\n:1\r\n:1\r\n"
			case protocol.RenewScript.SHA:
				// renew.lua on one hold, or on several (folded
				// renewals, internal/backend): an array of replies
				n, _ := strconv.Atoi(args[2])
				s.mu.Lock()
				s.renews += n
				s.mu.Unlock()
				reply = ":1\r\n"
				if n > 1 {
					reply = "*" + args[2] + "\r\n" + strings.Repeat(":1\r\n", n)
				}
			default:
				reply = ":1\r\n"
			}
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "SCAN":
			reply = "*2\r\n$1\r\n0\r\n*0\r\n" // no key: nothing to fold
		case "GET":
			reply = "$-1\r\n"
		default:
			reply = "+OK\r\n"
		}
		if _, err := io.WriteString(conn, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || line[0] != '*' {
		return nil, fmt.Errorf("bad command line %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		arg, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(arg, "\r\n")
	}
	return args, nil
}

// pipelines counts the pipelines a client sends, their commands and
// their sizes: the holds their commands name (a command of several
// holds' keys, folded renewals, counts them all; any other, one).
type pipelines struct {
	driver.Driver
	mu    sync.Mutex
	sizes []int
	cmds  []int
}

func (p *pipelines) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	size := 0
	for _, c := range cmds {
		size += max(1, c.Keys)
	}
	p.mu.Lock()
	p.sizes = append(p.sizes, size)
	p.cmds = append(p.cmds, len(cmds))
	p.mu.Unlock()
	return p.Driver.Pipeline(ctx, cmds)
}

// TestWatchdogOverAVirtualHour holds ten 30 s leases for an hour of
// virtual time: every renewal round is one pipeline carrying all ten, one
// round per TTL/3, and no lease is ever lost.
func TestWatchdogOverAVirtualHour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &scriptServer{}
		rdb := redis.NewClient(&redis.Options{
			Dialer: func(context.Context, string, string) (net.Conn, error) {
				client, server := net.Pipe()
				go srv.serve(server)
				return client, nil
			},
			Addr:            "127.0.0.1:1", // never dialled (see Dialer); an IP: no DNS in the bubble
			DisableIdentity: true,
			Protocol:        2,
		})
		defer rdb.Close()
		d := goredis.Own(rdb)
		defer d.Close()
		counted := &pipelines{Driver: d}
		c, err := NewWithDriver(counted)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		var leases []*Lease
		for i := range 10 {
			l, err := c.Mutex(fmt.Sprint("job-", i)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		for _, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("lease lost in the virtual hour: %v", err)
			}
		}
		counted.mu.Lock()
		sizes := counted.sizes
		counted.mu.Unlock()
		// One round every 10 s: 360 in an hour (the last may be due just
		// after it).
		if len(sizes) < 359 || len(sizes) > 360 {
			t.Fatalf("%d renewal rounds in an hour; want 360 (one per TTL/3)", len(sizes))
		}
		for i, n := range sizes {
			if n != 10 || counted.cmds[i] != 1 {
				t.Fatalf("a renewal round carried %d renewals in %d commands; want all 10 in one script call", n, counted.cmds[i])
			}
		}
		srv.mu.Lock()
		if srv.renews != 10*len(sizes) {
			t.Fatalf("server saw %d renewals for %d rounds", srv.renews, len(sizes))
		}
		srv.mu.Unlock()
		for _, l := range leases {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
