package kubeinformer

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/dbinformer/dbinformer/filter"
)

// What Where pushes down: top-level Eq and In on labels ("metadata.labels.<k>"
// or "labels.<k>") become label-selector requirements, Eq on
// metadata.name and metadata.namespace ("name", "namespace") field-selector
// terms (the two fields every resource's field selectors support). Both are
// added to Options.LabelSelector and Options.FieldSelector for List and
// Watch. The rest is evaluated here on each object the server sends.
const kubePushdown = "Eq and In on labels (metadata.labels.<key>) as a label selector, Eq on metadata.name and metadata.namespace as a field selector"

// labelKey returns the label key a field path names, if it names one.
func labelKey(field string) (string, bool) {
	for _, p := range []string{"metadata.labels.", "labels.", "ObjectMeta.Labels.", "Labels."} {
		if k, ok := strings.CutPrefix(field, p); ok && k != "" {
			return k, true
		}
	}
	return "", false
}

// selectorField returns the field-selector name a field path names, if any.
func selectorField(field string) (string, bool) {
	switch field {
	case "metadata.name", "name", "ObjectMeta.Name", "Name":
		return "metadata.name", true
	case "metadata.namespace", "namespace", "ObjectMeta.Namespace", "Namespace":
		return "metadata.namespace", true
	}
	return "", false
}

// labelRequirement translates e into a label-selector requirement; ok is
// false when e is not one (or its values are not valid label values).
func labelRequirement(e filter.Expr) (*labels.Requirement, bool) {
	k, ok := labelKey(e.Field)
	if !ok {
		return nil, false
	}
	var op selection.Operator
	switch e.Op {
	case filter.OpEq:
		op = selection.Equals
	case filter.OpIn:
		op = selection.In
		if len(e.Values) == 0 {
			return nil, false
		}
	default:
		return nil, false
	}
	vals := make([]string, 0, len(e.Values))
	for _, v := range e.Values {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		vals = append(vals, s)
	}
	r, err := labels.NewRequirement(k, op, vals)
	if err != nil {
		return nil, false
	}
	return r, true
}

// Where returns a copy of r that syncs only the objects f matches: what
// the apiserver can select is added to the label and field selectors (see
// kubePushdown), the rest is evaluated here on each object. Handlers see an
// object that starts matching as an add and one that stops (its labels
// changed, for example) as a delete carrying its last matching state: the
// apiserver reports such an object as deleted with its new, non-matching
// state, which the informer replaces with the cached one.
//
// Field paths are resolved against T's json tags, so a typed object
// (*corev1.ConfigMap) is needed for conditions on its fields; for
// *unstructured.Unstructured only filter.Key conditions and Where
// predicates resolve. A condition marked filter.Server that is not a label
// or name/namespace equality is refused.
func (r *Resource[T]) Where(f *filter.Filter[T]) (*Resource[T], error) {
	pushed, residue, err := f.Split(r.source, kubePushdown, func(e filter.Expr) bool {
		if _, ok := labelRequirement(e); ok {
			return true
		}
		if _, ok := selectorField(e.Field); ok && e.Op == filter.OpEq {
			_, isString := e.Values[0].(string)
			return isString
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("kubeinformer: %w", err)
	}
	c := *r
	var ls []string
	var fs []string
	if c.opts.LabelSelector != "" {
		ls = append(ls, c.opts.LabelSelector)
	}
	if c.opts.FieldSelector != "" {
		fs = append(fs, c.opts.FieldSelector)
	}
	for _, e := range pushed {
		if req, ok := labelRequirement(e); ok {
			ls = append(ls, req.String())
			continue
		}
		name, _ := selectorField(e.Field)
		fs = append(fs, fields.OneTermEqualSelector(name, e.Values[0].(string)).String())
	}
	c.opts.LabelSelector = strings.Join(slices.Compact(ls), ",")
	c.opts.FieldSelector = strings.Join(slices.Compact(fs), ",")
	if _, err := labels.Parse(c.opts.LabelSelector); err != nil {
		return nil, fmt.Errorf("kubeinformer: %s: label selector %q: %w", r.source, c.opts.LabelSelector, err)
	}
	if _, err := fields.ParseSelector(c.opts.FieldSelector); err != nil {
		return nil, fmt.Errorf("kubeinformer: %s: field selector %q: %w", r.source, c.opts.FieldSelector, err)
	}
	c.residue = residue
	return &c, nil
}

// Selectors returns the label and field selectors every List and Watch
// sends: Options.LabelSelector and FieldSelector with what Where pushed
// down.
func (r *Resource[T]) Selectors() (label, field string) {
	return r.opts.LabelSelector, r.opts.FieldSelector
}
