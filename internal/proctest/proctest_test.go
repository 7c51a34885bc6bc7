package proctest_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }

func TestRun(t *testing.T) {
	tests := []struct {
		args                   []string
		wantCode               int
		wantStdout, wantStderr string
	}{
		{[]string{"help"}, 0, "usage: sluice COMMAND", ""},
		{[]string{"nonsense"}, 2, "", `unknown command "nonsense"`},
		{[]string{"gateway", "--upstream", "ftp://x"}, 1, "", `--upstream "ftp://x"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := sluice.Run(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(stdout, tt.wantStdout) || (tt.wantStdout == "") != (stdout == "") {
				t.Errorf("stdout %q, want %q in it", stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) || (tt.wantStderr == "") != (stderr == "") {
				t.Errorf("stderr %q, want %q in it", stderr, tt.wantStderr)
			}
		})
	}
}

func TestStartSignalWait(t *testing.T) {
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") || !strings.HasPrefix(p.MetricsURL, "http://127.0.0.1:") ||
		strings.HasSuffix(p.MetricsURL, "/metrics") {
		t.Fatalf("URL %q, MetricsURL %q; want loopback URLs, the metrics one without its path", p.URL, p.MetricsURL)
	}
	for _, url := range []string{p.URL + "/healthz", p.MetricsURL + "/metrics"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: status %d, want 200", url, resp.StatusCode)
		}
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t); code != 0 {
		t.Errorf("exit code after SIGTERM %d, want 0", code)
	}
	if out := p.Stdout(); !strings.Contains(out, "listening on "+p.URL) {
		t.Errorf("stdout %q, want the listening line", out)
	}
	if logs := p.Stderr(); !strings.Contains(logs, "gateway stopped") {
		t.Errorf("stderr lacks the stop log:\n%s", logs)
	}
}

func TestKill(t *testing.T) {
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0")
	p.Kill()
	if code := p.Wait(t); code != -1 {
		t.Errorf("exit code after Kill %d, want -1", code)
	}
	if resp, err := http.Get(p.URL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /healthz after Kill: status %d, want no answer", resp.StatusCode)
	}
	p.Kill() // again, as the test's cleanup will: nothing happens
}

// TestStartFails checks what Start reports for a process that exits before
// it listens, and that StartEnv's environment reaches the process: the
// rules service reads its database from $SLUICE_POSTGRES.
func TestStartFails(t *testing.T) {
	tests := []struct {
		env  []string
		want []string
	}{
		{nil, []string{"sluice rules --listen 127.0.0.1:0 --trusted-network exited before listening: exit status 1", "--postgres is empty"}},
		{[]string{"SLUICE_POSTGRES=postgres://postgres@127.0.0.1:1/none"}, []string{"postgres connect"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.env), func(t *testing.T) {
			t.Setenv("SLUICE_POSTGRES", "")
			r := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				sluice.StartEnv(r, tt.env, "rules", "--listen", "127.0.0.1:0", "--trusted-network")
			}()
			<-done
			if r.msg == "" {
				t.Fatal("Start returned, want it to fail the test")
			}
			for _, want := range tt.want {
				if !strings.Contains(r.msg, want) {
					t.Errorf("Start failed with %q, want %q in it", r.msg, want)
				}
			}
		})
	}
}

// fatalRecorder is the test's testing.TB but for Fatal and Fatalf, which
// record the message and end the goroutine without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Path serves code that runs the binary its own way, without a test.
func ExampleBinary_Path() {
	var sluice proctest.Binary
	defer sluice.Close()
	path, err := sluice.Path()
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := exec.Command(path, "help").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	fmt.Println(first, err)
	// Output: usage: sluice COMMAND [flags] <nil>
}
