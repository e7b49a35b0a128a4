package servers

import (
	"os/exec"
	"syscall"
)

// setKubeProcAttr puts the apiserver in its own process group, so that
// stopping it reaches anything it started, and has the kernel kill it if
// the test process dies first, so that no apiserver outlives its test.
func setKubeProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalKubeProcess(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
