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
	// The hash fields inspection reads are the ones the scripts write
	// (FieldValue only names a mutex hold's value in Hold.Fields: it is
	// part of the hold's string, see scripts/lib_mutex.lua).
	all := ""
	entries, _ := ScriptFiles.ReadDir("scripts")
	for _, e := range entries {
		src, _ := ScriptFiles.ReadFile("scripts/" + e.Name())
		all += string(src)
	}
	for _, f := range []string{FieldTaken, FieldSeq, FieldFence, FieldPermits, FieldMode, FieldNext} {
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

// Every helper that a script calls is defined in it once loadScript has
// dropped the helpers it does not call (usedHelpers); and some are
// dropped. A call here is "name(" outside a whole-line comment, found
// apart from usedHelpers' own reading.
func TestScriptsKeepTheHelpersTheyCall(t *testing.T) {
	read := func(name string) string {
		b, err := ScriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	families := [][]string{
		{"lib_queue.lua"},
		{"lib_queue.lua", "lib_mutex.lua"},
		{"lib_queue.lua", "lib_rw.lua"},
		{"lib_queue.lua", "lib_sem.lua"},
	}
	entries, err := ScriptFiles.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	defs := regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	dropped := 0
	for _, fam := range families {
		var family string
		for _, f := range fam {
			family += read(f)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "lib") {
				continue
			}
			body := read(e.Name())
			out := usedHelpers(family, body) + body
			for _, m := range defs.FindAllStringSubmatch(family, -1) {
				name := m[1]
				defined := strings.Contains(out, "local function "+name+"(")
				called := regexp.MustCompile(`\b` + name + `\(`).MatchString(codeOnly(strings.ReplaceAll(out, "local function "+name+"(", "")))
				if called && !defined {
					t.Errorf("%v + %s: %s is called but was dropped", fam, e.Name(), name)
				}
				if !defined {
					dropped++
				}
			}
		}
	}
	if dropped == 0 {
		t.Error("no helper was dropped from any script")
	}
}
