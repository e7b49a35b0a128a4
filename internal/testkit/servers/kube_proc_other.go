//go:build !linux

package servers

import (
	"os"
	"os/exec"
)

func setKubeProcAttr(cmd *exec.Cmd) {}

func signalKubeProcess(cmd *exec.Cmd, kill bool) {
	if kill {
		_ = cmd.Process.Kill()
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
}
