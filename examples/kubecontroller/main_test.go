package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// runAsMainEnv makes the test binary act as the kubecontroller program, so
// that the SIGINT test runs the real main without a separate build.
const runAsMainEnv = "DBINFORMER_KUBECONTROLLER_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMainEnv) == "1" {
		os.Args = append([]string{"kubecontroller"}, strings.Fields(os.Getenv(runAsMainEnv+"_ARGS"))...)
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// client-go keeps HTTP transports and their idle connections for
		// the life of the process; klog's flush daemon starts on first use.
		goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

func createConfigMap(t *testing.T, k *harness.Kube, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cm, err := k.Client(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// TestReconcilesConfigMap runs the program in-process against a real
// apiserver: it reconciles a ConfigMap and a Pod the test creates, sees a
// delete, and returns nil when its context is cancelled.
func TestReconcilesConfigMap(t *testing.T) {
	k := harness.StartKube(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr exampletest.Output
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kubeconfig", k.Kubeconfig(), "--namespace", "default"}, &stdout, &stderr)
	}()
	exampletest.WaitOutput(t, &stderr, `msg="caches synced"`, 1)

	cm := createConfigMap(t, k, "default", "hello", map[string]string{"greeting": "hi", "name": "world"})
	exampletest.WaitOutput(t, &stdout, "reconciled configmap default/hello: version "+cm.ResourceVersion+", keys [greeting name]", 1)

	cs := k.Client(t)
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exampletest.WaitOutput(t, &stdout, "reconciled pod default/web: version "+pod.ResourceVersion+", phase Pending, 1 containers", 1)

	if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exampletest.WaitOutput(t, &stdout, "reconciled configmap default/hello: deleted", 1)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel, want nil; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return within a minute of its context being cancelled")
	}
	t.Logf("the program printed:\n%s", stdout.String())
	if !strings.HasSuffix(stdout.String(), "kubecontroller: stopped\n") {
		t.Fatalf("output does not end with the stop line:\n%s", stdout.String())
	}
}

// TestInterrupt runs the real main as a child process with --kubeconfig,
// lets it reconcile a ConfigMap, sends SIGINT (Ctrl-C) and requires a clean
// exit with status 0.
func TestInterrupt(t *testing.T) {
	k := harness.StartKube(t)
	ns := "default"
	var stdout, stderr exampletest.Output
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runAsMainEnv+"=1", runAsMainEnv+"_ARGS=--kubeconfig "+k.Kubeconfig()+" --namespace "+ns)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	exampletest.WaitOutput(t, &stderr, `msg="caches synced"`, 1)
	cm := createConfigMap(t, k, ns, "interrupt-me", map[string]string{"a": "1"})
	exampletest.WaitOutput(t, &stdout, "reconciled configmap "+ns+"/interrupt-me: version "+cm.ResourceVersion, 1)

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("after SIGINT the program exited with %v; stderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the program did not exit within a minute of SIGINT; output:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "kubecontroller: stopped") {
		t.Fatalf("no stop line after SIGINT:\n%s", stdout.String())
	}
}
