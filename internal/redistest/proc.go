package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// proc is one running child process whose standard output and error go to
// a log file. It is deliberately independent of redis-server specifics (apart
// from the readiness probe helpers below) so that cluster and Sentinel
// harnesses can reuse it.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	logOff  int64 // size of the log file when this process was started

	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed

	killOnce sync.Once
}

// startProc starts bin with args in dir, with env added to this
// process's environment, appending its output to logPath.
// The child is tied to the lifetime of the calling process where the
// platform supports it (see setDeathSignal).
func startProc(bin string, args, env []string, dir, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child keeps its own descriptor
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// An *os.File is handed to the child directly, so Wait does not depend
	// on copying goroutines (or on grandchildren closing a pipe).
	cmd.Stdout = logf
	cmd.Stderr = logf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, logPath: logPath, logOff: off, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (if the process is still alive) and waits until it has
// been reaped. It is safe to call more than once.
func (p *proc) kill() {
	p.killOnce.Do(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
		}
	})
	<-p.done
}

// signal delivers sig to a running process.
func (p *proc) signal(sig os.Signal) error {
	if p.exited() {
		return errNotRunning
	}
	return p.cmd.Process.Signal(sig)
}

// log returns what this process has written to its log so far.
func (p *proc) log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("<cannot read log: %v>", err)
	}
	if p.logOff <= int64(len(b)) {
		b = b[p.logOff:]
	}
	return string(b)
}

// logTail returns at most the last n bytes of the process log, for error
// messages.
func (p *proc) logTail(n int) string {
	s := p.log()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

var errNotRunning = errors.New("redistest: server is not running")

// probe connects to addr and checks that a redis-server with the given pid
// answers PING with PONG (not, for instance, LOADING). Checking the pid makes
// sure we are not talking to another server that happens to own the port.
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING replied %q", line)
	}
	info, err := readBulk(r)
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid)
	for _, l := range strings.Split(info, "\n") {
		if strings.TrimSpace(l) == want {
			return nil
		}
	}
	return fmt.Errorf("server at %s is not pid %d", addr, pid)
}

// readLine reads one CRLF-terminated RESP line without the terminator.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// readBulk reads one RESP bulk string.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("unexpected bulk header %q", line)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
