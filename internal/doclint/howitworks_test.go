package doclint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"
)

// TestHowItWorksNamesEveryKey: docs/how-it-works.md shows every key of
// every kind of lock (protocol.Kinds: the keys every kind has and each
// kind's own), each kind's tag, and the hand-off message as the code
// reads it, so that the page cannot drift from the protocol.
func TestHowItWorksNamesEveryKey(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "how-it-works.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	seen := map[string]bool{}
	for _, kd := range protocol.Kinds {
		if kd.Tag != "" && !strings.Contains(text, "`:"+kd.Tag+"`") && !strings.Contains(text, "}:"+kd.Tag+"`") {
			t.Errorf("how-it-works.md does not show the %s's key tag :%s", kd.Name, kd.Tag)
		}
		for _, sfx := range append(protocol.KeySuffixes(), kd.Own...) {
			if sfx == "" || seen[sfx] {
				continue
			}
			seen[sfx] = true
			if !strings.Contains(text, "`<lock>"+sfx+"`") && !strings.Contains(text, "`"+sfx+"`") {
				t.Errorf("how-it-works.md does not show the key <lock>%s (%s)", sfx, kd.Name)
			}
		}
	}
	if !strings.Contains(text, "`"+protocol.HandOffMessage+"`") {
		t.Errorf("how-it-works.md does not show the hand-off message as %q", protocol.HandOffMessage)
	}
}
