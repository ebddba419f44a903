package discovery

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The EndpointSlice fields ringlb reads, as discovery.k8s.io/v1 serves
// them in JSON (k8s.io/api/discovery/v1's names and tags). They are
// declared here rather than imported: k8s.io/api/discovery/v1 brings
// k8s.io/api/core/v1 along (for ObjectReference), every core type with
// its generated code and the package-level tables its init fills: 3.8 MB
// of the stripped binary (32.0 MB with them, 28.1 without). The decoder
// ignores the fields not declared.

// sliceGroupVersion is discovery.k8s.io/v1.
var sliceGroupVersion = schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"}

// serviceNameLabel labels a slice with its Service
// (discoveryv1.LabelServiceName).
const serviceNameLabel = "kubernetes.io/service-name"

// Address types (discoveryv1.AddressType).
const (
	addressTypeIPv4 = "IPv4"
	addressTypeIPv6 = "IPv6"
)

// endpointSlice is a discovery.k8s.io/v1 EndpointSlice.
type endpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	AddressType       string         `json:"addressType"`
	Endpoints         []endpoint     `json:"endpoints"`
	Ports             []endpointPort `json:"ports"`
}

type endpoint struct {
	Addresses  []string           `json:"addresses"`
	Conditions endpointConditions `json:"conditions,omitempty"`
	Hostname   *string            `json:"hostname,omitempty"`
	TargetRef  *objectReference   `json:"targetRef,omitempty"`
}

type endpointConditions struct {
	Serving     *bool `json:"serving,omitempty"`
	Terminating *bool `json:"terminating,omitempty"`
}

// objectReference is the part of a core/v1 ObjectReference an endpoint's
// targetRef is read for.
type objectReference struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

type endpointPort struct {
	Name     *string `json:"name,omitempty"`
	Protocol *string `json:"protocol,omitempty"`
	Port     *int32  `json:"port,omitempty"`
}

// endpointSliceList is a discovery.k8s.io/v1 EndpointSliceList.
type endpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []endpointSlice `json:"items"`
}

// addSliceTypes registers the two kinds in scheme, as
// discoveryv1.AddToScheme does for its own.
func addSliceTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypeWithName(sliceGroupVersion.WithKind("EndpointSlice"), &endpointSlice{})
	scheme.AddKnownTypeWithName(sliceGroupVersion.WithKind("EndpointSliceList"), &endpointSliceList{})
	metav1.AddToGroupVersion(scheme, sliceGroupVersion)
	return nil
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeepCopyObject implements runtime.Object.
func (s *endpointSlice) DeepCopyObject() runtime.Object { return s.deepCopy() }

func (s *endpointSlice) deepCopy() *endpointSlice {
	if s == nil {
		return nil
	}
	c := &endpointSlice{TypeMeta: s.TypeMeta, AddressType: s.AddressType}
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	if s.Endpoints != nil {
		c.Endpoints = make([]endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			c.Endpoints[i] = endpoint{
				Addresses: append([]string(nil), e.Addresses...),
				Conditions: endpointConditions{
					Serving: copyPtr(e.Conditions.Serving), Terminating: copyPtr(e.Conditions.Terminating),
				},
				Hostname:  copyPtr(e.Hostname),
				TargetRef: copyPtr(e.TargetRef),
			}
		}
	}
	if s.Ports != nil {
		c.Ports = make([]endpointPort, len(s.Ports))
		for i, p := range s.Ports {
			c.Ports[i] = endpointPort{Name: copyPtr(p.Name), Protocol: copyPtr(p.Protocol), Port: copyPtr(p.Port)}
		}
	}
	return c
}

// DeepCopyObject implements runtime.Object.
func (l *endpointSliceList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	c := &endpointSliceList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	if l.Items != nil {
		c.Items = make([]endpointSlice, len(l.Items))
		for i := range l.Items {
			c.Items[i] = *l.Items[i].deepCopy()
		}
	}
	return c
}
