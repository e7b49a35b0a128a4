package bench_test

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"
)

// startChild re-executes this test binary as a child process that TestMain
// hands to its role: env set to spec as JSON. Its stderr is ours, its
// stdout is returned for its reports, and it dies with this process.
func startChild(tb testing.TB, env string, spec any) (*exec.Cmd, io.ReadCloser) {
	tb.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env+"="+string(js))
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd, out
}
