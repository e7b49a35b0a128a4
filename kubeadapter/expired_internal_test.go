package kubeadapter

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestIsExpired pins which apiserver answers mean "relist": the statuses
// below are the ones kube-apiserver builds for a compacted or evicted
// version, a too old continue token, and a version it has not reached.
func TestIsExpired(t *testing.T) {
	tooLarge := apierrors.NewTimeoutError("Too large resource version", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	gone := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Message: "gone"}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"too old resource version", apierrors.NewResourceExpired("too old resource version: 5 (9)"), true},
		{"continue token expired", apierrors.NewResourceExpired("The provided continue parameter is too old"), true},
		{"410 without reason", gone, true},
		{"wrapped 410", fmt.Errorf("watch: %w", gone), true},
		{"too large resource version", tooLarge, true},
		{"plain timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x"), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("no")), false},
		{"network", errors.New("connection refused"), false},
	} {
		if got := isExpired(tc.err); got != tc.want {
			t.Errorf("%s: isExpired(%v) = %t, want %t", tc.name, tc.err, got, tc.want)
		}
	}
}
