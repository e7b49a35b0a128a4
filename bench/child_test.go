package bench_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startChild re-executes this test binary as a child process that TestMain
// hands to its role: env set to spec as JSON. Its stderr is ours, its
// stdout is returned for its reports, and it dies with this process.
func startChild(tb testing.TB, env string, spec any) (*exec.Cmd, io.ReadCloser) {
	tb.Helper()
	cmd := childCommand(tb, env, spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd, out
}

// startChildWithInput is startChild for a child that also takes requests
// on its stdin (in): closing in ends its input.
func startChildWithInput(tb testing.TB, env string, spec any) (cmd *exec.Cmd, in io.WriteCloser, out io.ReadCloser) {
	tb.Helper()
	cmd = childCommand(tb, env, spec)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if out, err = cmd.StdoutPipe(); err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd, in, out
}

func childCommand(tb testing.TB, env string, spec any) *exec.Cmd {
	tb.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env+"="+string(js))
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	return cmd
}

// runChild is a child process's main: spec (JSON) decoded into S, then
// role; the exit code is 2 for a spec it cannot read, 1 when role fails
// (the error on stderr after name).
func runChild[S any](name, spec string, role func(S) error) int {
	var s S
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 2
	}
	if err := role(s); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}

// dialJetStream connects a child process to the NATS server at url.
func dialJetStream(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// procStatusKB is field (VmRSS:, VmHWM:, …) of /proc/self/status, in kB;
// 0 where there is no /proc.
func procStatusKB(field string) uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte(field)); ok {
			var kb uint64
			if _, err := fmt.Sscan(string(rest), &kb); err == nil {
				return kb
			}
		}
	}
	return 0
}
