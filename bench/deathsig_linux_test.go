package bench_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the benchmark's
// process dies without stopping it (a test timeout, a crash): a relay
// replica left running would go on campaigning against servers that are
// gone.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
