package dlock

import (
	"regexp"
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"
)

// latch_down.lua answers with the statuses latch.go names, and only them.
func TestLatchRepliesAgree(t *testing.T) {
	src, err := protocol.ScriptFiles.ReadFile("scripts/latch_down.lua")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{latchDone: false, latchMoved: false, latchUnsure: false}
	for _, m := range regexp.MustCompile(`(?m)^\s*return \{'(\w+)'`).FindAllStringSubmatch(string(src), -1) {
		if _, ok := known[m[1]]; !ok {
			t.Errorf("latch_down.lua answers %q, which latch.go does not know", m[1])
		}
		known[m[1]] = true
	}
	for s, used := range known {
		if !used {
			t.Errorf("latch_down.lua never answers %q", s)
		}
	}
}
