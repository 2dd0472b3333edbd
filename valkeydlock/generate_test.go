package valkeydlock_test

import (
	"os/exec"
	"testing"
)

// TestGenerated fails when the package is not what genvalkey makes of
// rueidisdlock now: a change to rueidisdlock needs a go generate here.
func TestGenerated(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(gobin, "run", "./internal/genvalkey", "-check").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
