//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestTopInATerminal runs "dlock top" in a tmux pane of 80×24 while two
// locks are held, one with a name far wider than the pane: the held
// lock's row shows, no row is wider than the pane (tmux joins a wrapped
// row back, -J), top draws on the alternate screen; and after q, Ctrl-C
// (raw mode: a key, not a signal) or SIGTERM it has left the alternate
// screen, the terminal's mode is as before (stty -g) and it exited 0.
// Its refresh interval is an hour: the frame it shows is the first, and
// a resize (100 columns) is drawn anew at once (SIGWINCH), not at the
// next refresh.
func TestTopInATerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed: top's terminal test runs top in a tmux pane (./test.sh installs tmux)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t)
	ctx := testCtx(t)
	c := labelled(t, prefix, "tmux-test")
	long := "top/" + strings.Repeat("w", 120)
	for _, name := range []string{"top/held", long} {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock")
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %q: %v: %s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })

	top := "DLOCK_TEST_CLI=1 '" + exe + "' top --redis '" + serverURL() + "' --prefix '" + prefix + "' --interval 1h"
	for _, tc := range []struct {
		how    string
		script string // runs top, then says how it ended and whether the terminal's mode came back
		quit   func(session string)
	}{
		{"q", top + "; st=$?", func(s string) { tm("send-keys", "-t", s, "q") }},
		{"C-c", top + "; st=$?", func(s string) { tm("send-keys", "-t", s, "C-c") }},
		// in the background, so that the test can signal it: stdin is
		// then /dev/null, and top reads no keys
		{"SIGTERM", top + " & echo $! > " + filepath.Join(dir, "pid") + "; wait $!; st=$?", func(string) {
			b, err := os.ReadFile(filepath.Join(dir, "pid"))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("kill", "-TERM", strings.TrimSpace(string(b))).CombinedOutput(); err != nil {
				t.Fatalf("kill: %v: %s", err, out)
			}
		}},
	} {
		t.Run(tc.how, func(t *testing.T) {
			session := "top-" + strings.ReplaceAll(tc.how, "-", "")
			script := filepath.Join(dir, session+".sh")
			body := "before=$(stty -g)\n" + tc.script + "\n" +
				`if [ "$(stty -g)" = "$before" ]; then echo "tty restored"; else echo "tty changed"; fi` + "\n" +
				`echo "top exited $st"` + "\nexec cat\n"
			if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			tm("new-session", "-d", "-x", "80", "-y", "24", "-s", session, "sh "+script)
			pane := func() string { return tm("capture-pane", "-p", "-J", "-t", session) }
			var screen string
			waitFor(t, 20*time.Second, "top to show the held lock", func() bool {
				screen = pane()
				return strings.Contains(screen, "top/held") && strings.Contains(screen, "top/www")
			})
			for _, line := range strings.Split(screen, "\n") {
				if n := utf8.RuneCountInString(line); n > 80 {
					t.Errorf("a row of %d columns in a pane of 80 (wrapped):\n%q", n, line)
				}
			}
			if got := strings.TrimSpace(tm("display-message", "-p", "-t", session, "#{alternate_on}")); got != "1" {
				t.Errorf("alternate_on %q while top runs, want 1", got)
			}
			if tc.how == "q" {
				tm("resize-window", "-t", session, "-x", "100", "-y", "24")
				waitFor(t, 5*time.Second, "top to draw its frame anew at 100 columns", func() bool {
					widest := 0
					for _, line := range strings.Split(pane(), "\n") {
						widest = max(widest, utf8.RuneCountInString(line))
					}
					return widest == 100
				})
			}
			tc.quit(session)
			waitFor(t, 10*time.Second, "top to exit", func() bool {
				screen = pane()
				return strings.Contains(screen, "top exited")
			})
			if !strings.Contains(screen, "top exited 0") || !strings.Contains(screen, "tty restored") {
				t.Errorf("after %s: want top exited 0 and the terminal's mode restored; screen:\n%s", tc.how, screen)
			}
			if got := strings.TrimSpace(tm("display-message", "-p", "-t", session, "#{alternate_on}")); got != "0" {
				t.Errorf("alternate_on %q after top exited, want 0", got)
			}
			if strings.Contains(screen, "dlock top") {
				t.Errorf("top's frame is still on the main screen after it exited:\n%s", screen)
			}
		})
	}
}

// TestTopIntoAPipe runs "dlock top" as a process of its own with its
// output a pipe: its frames, one after another, with no escape sequence.
func TestTopIntoAPipe(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t)
	ctx := testCtx(t)
	l, err := labelled(t, prefix, "pipe-test").Mutex("top/piped").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	cmd := exec.Command(exe, "top", "--redis", serverURL(), "--prefix", prefix, "--interval", "100ms", "--iterations", "2")
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("top: %v; stdout:\n%s", err, out)
	}
	if n := strings.Count(string(out), "dlock top "); n != 2 || strings.Contains(string(out), "\x1b") || !strings.Contains(string(out), "top/piped") {
		t.Errorf("%d frames, want 2 with the held lock and no escape sequence:\n%q", n, out)
	}
}

// TestFitFrame: rows cut to the width, rows past the height left out,
// each row but the last ended by clear-to-end-of-row and CR LF.
func TestFitFrame(t *testing.T) {
	got := fitFrame("abcdef\nxy–z\n3\n4\n", 4, 3)
	want := frameStart + "abcd" + lineEnd + "xy–z" + lineEnd + "3" + frameEnd
	if got != want {
		t.Errorf("fitFrame = %q, want %q", got, want)
	}
}
