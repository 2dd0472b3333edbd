package hold

import (
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.Ignored()...) }
