package browser

import (
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// sluice is cmd/sluice of this repository, built once for the package's
// tests; its StartEnv runs a server the test owns.
var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }
