package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/dlock-go/dlock/driver"
)

// appendCommand appends c to b as a RESP array of bulk strings. A word
// that is not a string, an int or an int64 is an error (nothing is
// appended then).
func appendCommand(b []byte, c driver.Command) ([]byte, error) {
	for _, a := range c.Args {
		switch a.(type) {
		case string, int, int64:
		default:
			return b, fmt.Errorf("dlock: a command word of type %T", a)
		}
	}
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(c.Args)), 10)
	b = append(b, '\r', '\n')
	var num [20]byte
	for _, a := range c.Args {
		switch v := a.(type) {
		case string:
			b = appendBulk(b, v)
		case int:
			b = appendBulk(b, strconv.AppendInt(num[:0], int64(v), 10))
		case int64:
			b = appendBulk(b, strconv.AppendInt(num[:0], v, 10))
		}
	}
	return b, nil
}

// appendBulk appends s as a RESP bulk string.
func appendBulk[T string | []byte](b []byte, s T) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// ServerError is an error reply of the server: its message, the error's
// code first ("NOSCRIPT No matching script...").
type ServerError string

func (e ServerError) Error() string { return string(e) }

// errProtocol is a reply this package cannot read: the connection is
// dropped.
var errProtocol = errors.New("dlock: malformed reply from redis")

// maxDepth bounds the nesting of arrays in a reply (dlock's replies nest
// two or three deep).
const maxDepth = 16

// readReply reads one RESP2 reply (or the RESP3 types a server may send
// to a RESP2 connection after all) as a driver.Reply: an error reply as
// a *driver.ErrorReply, inside arrays too (an EXEC's).
func readReply(r *bufio.Reader) (driver.Reply, error) {
	v, err := readValue(r, 0)
	if err != nil {
		return driver.Reply{}, err
	}
	if e, ok := v.(*driver.ErrorReply); ok {
		return driver.Reply{Err: e}, nil
	}
	return driver.Reply{Val: v}, nil
}

func readValue(r *bufio.Reader, depth int) (any, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProtocol
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return string(body), nil
	case '-', '!':
		return &driver.ErrorReply{Err: ServerError(body)}, nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, errProtocol
		}
		return n, nil
	case '_':
		return nil, nil
	case '#':
		return len(body) == 1 && body[0] == 't', nil
	case ',':
		f, err := strconv.ParseFloat(string(body), 64)
		if err != nil {
			return nil, errProtocol
		}
		return f, nil
	case '$', '=':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 {
			return nil, errProtocol
		}
		if n == -1 {
			return nil, nil
		}
		var s string
		if n+2 <= r.Size() { // read in place: one copy, the string's
			buf, err := r.Peek(n + 2)
			if err != nil {
				return nil, err
			}
			s = string(buf[:n])
			_, _ = r.Discard(n + 2)
		} else {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, err
			}
			s = string(buf[:n])
		}
		if kind == '=' && len(s) >= 4 { // verbatim: "txt:" first
			s = s[4:]
		}
		return s, nil
	case '*', '%', '~', '>':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 || depth >= maxDepth {
			return nil, errProtocol
		}
		if n == -1 {
			return nil, nil
		}
		if kind == '%' {
			n *= 2 // a map: its keys and values in turn
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readValue(r, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errProtocol
}

// scanReply reports how long the reply at the start of b is, and false
// when b does not hold all of it yet: readReply then reads it from
// buffered bytes only, so a caller that reads its own reply never
// blocks inside one, and can hand the connection over between two
// replies with nothing half read. A malformed reply counts as complete
// (readReply then says what is wrong).
func scanReply(b []byte) (int, bool) {
	pos, need := 0, 1
	for need > 0 {
		i := bytes.IndexByte(b[pos:], '\n')
		if i < 0 {
			return 0, false
		}
		line := b[pos : pos+i+1]
		pos += i + 1
		need--
		if len(line) < 3 {
			return pos, true
		}
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		switch line[0] {
		case '$', '=':
			if err != nil {
				return pos, true
			}
			if n >= 0 {
				if len(b)-pos < n+2 {
					return 0, false
				}
				pos += n + 2
			}
		case '*', '~', '>':
			if err != nil {
				return pos, true
			}
			need += max(n, 0)
		case '%':
			if err != nil {
				return pos, true
			}
			need += 2 * max(n, 0)
		}
	}
	return pos, true
}
