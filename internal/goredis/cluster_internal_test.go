package goredis

import "testing"

// A redirect's address is read as go-redis reads one: an IPv6 host gets
// its brackets, a loopback host the answering node's host when that one
// is not loopback.
func TestRedirected(t *testing.T) {
	for _, c := range []struct{ to, from, want string }{
		{"10.0.0.2:7001", "10.0.0.1:7000", "10.0.0.2:7001"},
		{"::1:7001", "[::1]:7000", "[::1]:7001"},
		{"fe80::2:7001", "[fe80::1]:7000", "[fe80::2]:7001"},
		{"127.0.0.1:7001", "10.0.0.1:7000", "10.0.0.1:7001"},
		{"127.0.0.1:7001", "127.0.0.1:7000", "127.0.0.1:7001"},
		{"localhost:7001", "redis.example:7000", "redis.example:7001"},
		{"redis-2.example:7001", "redis-1.example:7000", "redis-2.example:7001"},
	} {
		if got := redirected(c.to, c.from); got != c.want {
			t.Errorf("redirected(%q, %q) = %q, want %q", c.to, c.from, got, c.want)
		}
	}
}
