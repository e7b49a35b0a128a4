package kubeinformer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/dbinformer/dbinformer/core/driver"
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

// TestAPIError: what each apiserver answer becomes for the informer.
func TestAPIError(t *testing.T) {
	r := &Resource[*unstructured.Unstructured]{source: "kubernetes widgets"}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "test.dbinformer.io", Resource: "widgets"}, "")
	for _, tc := range []struct {
		name               string
		err                error
		expired, permanent bool
	}{
		{"410", apierrors.NewResourceExpired("too old resource version: 5 (9)"), true, false},
		{"404: resource not served", notFound, false, true},
		{"403", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no")), false, false},
		{"401", apierrors.NewUnauthorized("Unauthorized"), false, false},
		{"503 while starting", apierrors.NewServiceUnavailable("apiserver is starting"), false, false},
		{"network", errors.New("connection refused"), false, false},
	} {
		err := r.apiError("watch", tc.err)
		if want := map[string]string{"401": "(401: ", "403": "(403: "}[tc.name]; want != "" && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v does not say %q", tc.name, err, want)
		}
		if errors.Is(err, driver.ErrExpired) != tc.expired || errors.Is(err, driver.ErrPermanent) != tc.permanent || !errors.Is(err, tc.err) {
			t.Errorf("%s: %v: expired %t, permanent %t; want %t, %t, wrapping the original", tc.name, err,
				errors.Is(err, driver.ErrExpired), errors.Is(err, driver.ErrPermanent), tc.expired, tc.permanent)
		}
	}
}
