package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Packets. A Net is a Linux network namespace joined to the test's own by
// a veth pair; a server started in it (Net.Start) is reached across the
// pair, so iptables rules inside the namespace can drop its packets: all
// of them, a random share, one direction. TCP then retransmits, and the
// commands and replies that were dropped arrive late once the rules go —
// after the client gave up, closed the connection even — which is the
// fault the "late commands" rules of the library are about (a reply lost
// after the server applied the command included). No proxy stands between
// client and server: the client's own socket does the retransmitting.
//
// It needs root, ip(8) and iptables(8); NewNet skips the test, saying so,
// elsewhere.

// ErrNoNetns is returned by OpenNet when namespaces cannot be made here.
var ErrNoNetns = errors.New("redistest: network namespaces need root, ip and iptables")

// Net is a network namespace with a veth pair to the caller's. Its methods
// are safe for concurrent use.
type Net struct {
	name   string // the namespace
	outer  string // the veth end in the caller's namespace
	hostIP string // the outer end's address
	inIP   string // the inner end's address: where servers listen

	mu    sync.Mutex
	rules [][]string // the iptables rules in force, as added
}

var netSeq atomic.Int32

// NewNet makes a namespace for t and removes it when t ends; t is skipped
// when namespaces cannot be made here (not root, no ip or iptables).
func NewNet(t testing.TB) *Net {
	t.Helper()
	n, err := OpenNet()
	if errors.Is(err, ErrNoNetns) {
		t.Skipf("packets: %v (skipped)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// OpenNet makes a namespace; the caller must Close it.
func OpenNet() (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w (not root)", ErrNoNetns)
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w (%s: %v)", ErrNoNetns, tool, err)
		}
	}
	// A name and a /30 of 10.200.0.0/14 of its own per process and call:
	// tests of several packages may run at once.
	k := int(netSeq.Add(1)) + os.Getpid()%2048*8
	n := &Net{
		name:   fmt.Sprintf("dlk%d-%d", os.Getpid(), k),
		outer:  fmt.Sprintf("dlk%d", k%100000),
		hostIP: fmt.Sprintf("10.%d.%d.%d", 200+k>>14&3, k>>6&255, (k&63)*4+1),
	}
	n.inIP = fmt.Sprintf("10.%d.%d.%d", 200+k>>14&3, k>>6&255, (k&63)*4+2)
	inner := n.outer + "i"
	steps := [][]string{
		{"ip", "netns", "add", n.name},
		{"ip", "link", "add", n.outer, "type", "veth", "peer", "name", inner},
		{"ip", "link", "set", inner, "netns", n.name},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.outer},
		{"ip", "link", "set", n.outer, "up"},
		{"ip", "netns", "exec", n.name, "ip", "addr", "add", n.inIP + "/30", "dev", inner},
		{"ip", "netns", "exec", n.name, "ip", "link", "set", inner, "up"},
		{"ip", "netns", "exec", n.name, "ip", "link", "set", "lo", "up"},
		// the iptables of the namespace answer at all (nf_tables loaded)
		{"ip", "netns", "exec", n.name, "iptables", "-L", "-n"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			// a container without NET_ADMIN, a kernel without veth or
			// nf_tables: no namespaces here
			n.Close()
			return nil, fmt.Errorf("%w (%v)", ErrNoNetns, err)
		}
	}
	return n, nil
}

// Close removes the namespace (its servers are killed by their own Close;
// a server still in it dies with the namespace's last link).
func (n *Net) Close() {
	run("ip", "link", "del", n.outer)
	run("ip", "netns", "del", n.name)
}

// Start starts a redis-server in the namespace, listening on its inner
// address, and closes it when t ends.
func (n *Net) Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := start(opts, func(s *Server) error {
		s.host = n.inIP
		s.wrap = func(bin string, args []string) (string, []string) {
			// a later --bind wins over serverArgs' loopback one
			args = append(append([]string(nil), args...), "--bind", n.inIP)
			return "ip", append([]string{"netns", "exec", n.name, bin}, args...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// DropRequests drops every packet to port in the namespace (commands,
// and the client's acknowledgements of replies): commands are held in the
// client's socket and retransmitted, so they arrive late once Heal runs.
func (n *Net) DropRequests(port int) error {
	return n.add("INPUT", "-p", "tcp", "--dport", strconv.Itoa(port), "-j", "DROP")
}

// DropReplies drops every packet from port (replies, and the server's
// acknowledgements): the server runs what it is sent, its replies are
// lost until Heal.
func (n *Net) DropReplies(port int) error {
	return n.add("OUTPUT", "-p", "tcp", "--sport", strconv.Itoa(port), "-j", "DROP")
}

// DropShare drops a random share p (0 < p < 1) of the packets to and from
// port, each direction on its own.
func (n *Net) DropShare(port int, p float64) error {
	prob := strconv.FormatFloat(p, 'f', 4, 64)
	if err := n.add("INPUT", "-p", "tcp", "--dport", strconv.Itoa(port),
		"-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"); err != nil {
		return err
	}
	return n.add("OUTPUT", "-p", "tcp", "--sport", strconv.Itoa(port),
		"-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP")
}

// Heal removes every rule: what TCP held back is delivered as it
// retransmits.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for i := len(n.rules) - 1; i >= 0; i-- {
		r := n.rules[i]
		del := append([]string{"ip", "netns", "exec", n.name, "iptables", "-D"}, r...)
		errs = append(errs, run(del...))
	}
	n.rules = nil
	return errors.Join(errs...)
}

func (n *Net) add(rule ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := run(append([]string{"ip", "netns", "exec", n.name, "iptables", "-A"}, rule...)...); err != nil {
		return err
	}
	n.rules = append(n.rules, rule)
	return nil
}

// run runs a command, its output in the error when it fails.
func run(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("redistest: %v: %v: %s", args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
