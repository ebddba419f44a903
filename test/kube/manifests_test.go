package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// manifestNamespace is where the manifests are applied, as `kubectl apply
// -n shop` would: they name no namespace of their own.
const manifestNamespace = "shop"

// applier applies manifests to the control plane's API server with
// server-side dry-run and strict field validation, as `kubectl apply
// --server-side --dry-run=server --validate=strict -n shop` does: the API
// server decodes, defaults, validates and admits every object, and stores
// nothing.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cp *controlPlane) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cp.config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.config)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply applies every object of a YAML stream and returns the objects it
// read ("Kind/name") and what the API server refused.
func (a *applier) apply(ctx context.Context, data []byte) (objects []string, errs []error) {
	dec := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objects, errs
		} else if err != nil {
			return objects, append(errs, err)
		}
		if len(obj.Object) == 0 {
			continue // an empty document
		}
		what := obj.GetKind() + "/" + obj.GetName()
		objects = append(objects, what)
		gvk := obj.GroupVersionKind()
		m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			errs = append(errs, errors.New(what+": "+err.Error()))
			continue
		}
		var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if ns := obj.GetNamespace(); ns != "" && ns != manifestNamespace {
				errs = append(errs, errors.New(what+": names namespace "+ns+": apply -n "+manifestNamespace+" refuses it"))
				continue
			}
			obj.SetNamespace(manifestNamespace)
			ri = a.dyn.Resource(m.Resource).Namespace(manifestNamespace)
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		force := true
		_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager:    "ringlb-manifest-test",
			Force:           &force,
			DryRun:          []string{metav1.DryRunAll},
			FieldValidation: metav1.FieldValidationStrict,
		})
		if err != nil {
			errs = append(errs, errors.New(what+": "+err.Error()))
		}
	}
}

// TestExampleManifests applies each of examples/kubernetes/*.yaml to a
// real kube-apiserver, server-side, dry-run, with strict field validation:
// a field that does not exist, a value of the wrong type or an invalid
// object (a bad port, a missing selector, a preStop hook the API server
// does not know) fails. First it checks that the check bites: a
// misspelled field and an invalid object are refused.
func TestExampleManifests(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: manifestNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, cp)

	for name, bad := range map[string]string{
		"a misspelled field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n" +
			"  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: i}]}\n",
		"an invalid object": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{name: http, port: 0}]\n",
	} {
		if _, errs := a.apply(ctx, []byte(bad)); len(errs) == 0 {
			t.Errorf("%s was accepted: the check would not catch it", name)
		} else {
			t.Logf("%s: refused as it must be: %v", name, errs[0])
		}
	}

	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "kubernetes", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("examples/kubernetes: %d manifests (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objects, errs := a.apply(ctx, data)
			for _, err := range errs {
				t.Error(err)
			}
			if len(objects) < 3 {
				t.Errorf("only %d objects: %q", len(objects), objects)
			}
			t.Logf("%d objects applied (dry-run) to namespace %s: %s", len(objects), manifestNamespace, strings.Join(objects, ", "))
		})
	}
}
