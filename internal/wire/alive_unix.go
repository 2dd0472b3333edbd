//go:build unix

package wire

import (
	"net"
	"syscall"
)

// alive reports whether nc, idle, is still open at the server's end: a
// read that does not wait finds nothing to read (the server sends nothing
// unasked on a RESP2 connection, so anything, or the end of the stream,
// means the connection is done). A connection whose socket cannot be
// reached (TLS) is taken to be alive.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && ok
}
