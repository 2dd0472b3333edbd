package dlock

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// lib.lua and protocol.go name the same protocol values.
func TestProtocolAgrees(t *testing.T) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = ('[^']*'|-?\d+)`).FindAllStringSubmatch(string(lib), -1) {
		lua[m[1]] = strings.Trim(m[2], "'")
	}
	want := map[string]string{
		"HELD":         strconv.Itoa(replyHeld),
		"BUSY":         strconv.Itoa(replyBusy),
		"NOT_HELD":     strconv.Itoa(replyNotHeld),
		"TOO_MANY":     strconv.Itoa(replyTooMany),
		"TTL_NOT_HELD": strconv.Itoa(replyTTLNotHeld),
		"STALE":        strconv.Itoa(replyStale),
		"WAKE_ALL":     wakeAll,
		"REFUSED":      refusedMark,
	}
	for name, v := range want {
		if lua[name] != v {
			t.Errorf("lib.lua %s = %q; protocol.go says %q", name, lua[name], v)
		}
	}
	if len(lua) != len(want) {
		t.Errorf("lib.lua names %v; protocol.go names %d values", lua, len(want))
	}
	// The hash fields inspection reads are the ones the scripts write.
	all := ""
	entries, _ := scriptFiles.ReadDir("scripts")
	for _, e := range entries {
		src, _ := scriptFiles.ReadFile("scripts/" + e.Name())
		all += string(src)
	}
	for _, f := range []string{fieldTaken, fieldSeq, fieldValue, fieldFence, fieldPermits, fieldMode, fieldNext} {
		if !strings.Contains(all, "'"+f+"'") {
			t.Errorf("no script names the hash field %q that inspect.go reads", f)
		}
	}
	// The scripts use the names, not the values.
	literal := regexp.MustCompile(`'(one|all|free:)'|return \{?-\d`)
	for _, e := range entries {
		if e.Name() == "lib.lua" {
			continue
		}
		src, _ := scriptFiles.ReadFile("scripts/" + e.Name())
		for i, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") && literal.MatchString(line) {
				t.Errorf("%s:%d: a protocol value written out: %s", e.Name(), i+1, line)
			}
		}
	}
}
