package protocol

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// lib.lua and go name the same protocol values.
func TestProtocolAgrees(t *testing.T) {
	lib, err := ScriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = ('[^']*'|-?\d+)`).FindAllStringSubmatch(string(lib), -1) {
		lua[m[1]] = strings.Trim(m[2], "'")
	}
	want := map[string]string{
		"HELD":         strconv.Itoa(ReplyHeld),
		"BUSY":         strconv.Itoa(ReplyBusy),
		"NOT_HELD":     strconv.Itoa(ReplyNotHeld),
		"TOO_MANY":     strconv.Itoa(ReplyTooMany),
		"TTL_NOT_HELD": strconv.Itoa(ReplyTTLNotHeld),
		"STALE":        strconv.Itoa(ReplyStale),
		"SLOW":         strconv.Itoa(ReplySlow),
		"WAKE_ALL":     WakeAll,
		"REFUSED":      RefusedMark,
	}
	for name, v := range want {
		if lua[name] != v {
			t.Errorf("lib.lua %s = %q; go says %q", name, lua[name], v)
		}
	}
	if len(lua) != len(want) {
		t.Errorf("lib.lua names %v; go names %d values", lua, len(want))
	}
	// The hash fields inspection reads are the ones the scripts write.
	all := ""
	entries, _ := ScriptFiles.ReadDir("scripts")
	for _, e := range entries {
		src, _ := ScriptFiles.ReadFile("scripts/" + e.Name())
		all += string(src)
	}
	for _, f := range []string{FieldTaken, FieldSeq, FieldValue, FieldFence, FieldPermits, FieldMode, FieldNext} {
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
		src, _ := ScriptFiles.ReadFile("scripts/" + e.Name())
		for i, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") && literal.MatchString(line) {
				t.Errorf("%s:%d: a protocol value written out: %s", e.Name(), i+1, line)
			}
		}
	}
}
