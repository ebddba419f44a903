// Package kubetest is a small Kubernetes API server on loopback for tests
// that cannot run the real one: it serves the discovery.k8s.io/v1
// EndpointSlices a test sets, as list and watch over real HTTP, the way
// client-go's informers read them (JSON, label selector
// kubernetes.io/service-name, resource versions, watch events), and it
// can go down (every connection cut, every request refused) and come back.
// A kubeconfig file naming it is written for the code under test.
//
// It is not a Kubernetes: no validation, no other resources, no auth. The
// scenario against a real kube-apiserver and EndpointSlice controller is
// in test/kube, a module of its own.
package kubetest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Server is the API server. Its methods are safe for concurrent use.
type Server struct {
	URL string

	srv *httptest.Server

	mu      sync.Mutex
	changed *sync.Cond
	rv      int
	slices  map[string]*discoveryv1.EndpointSlice // namespace/name
	history []event                               // every change, in order
	down    bool
	lists   int
	watches int
}

type event struct {
	rv    int
	typ   string // ADDED, MODIFIED, DELETED
	slice *discoveryv1.EndpointSlice
}

// New starts a server and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{slices: map[string]*discoveryv1.EndpointSlice{}}
	s.changed = sync.NewCond(&s.mu)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(func() {
		s.mu.Lock()
		s.down = true
		s.changed.Broadcast()
		s.mu.Unlock()
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// Kubeconfig writes a kubeconfig file naming the server into dir and
// returns its path.
func (s *Server) Kubeconfig(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q}
users:
- name: test
  user: {}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, s.URL)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Set creates or replaces a slice (by namespace and name).
func (s *Server) Set(sl *discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl = sl.DeepCopy()
	key := sl.Namespace + "/" + sl.Name
	typ := "MODIFIED"
	if s.slices[key] == nil {
		typ = "ADDED"
	}
	s.rv++
	sl.ResourceVersion = strconv.Itoa(s.rv)
	s.slices[key] = sl
	s.history = append(s.history, event{rv: s.rv, typ: typ, slice: sl})
	s.changed.Broadcast()
}

// Delete removes a slice.
func (s *Server) Delete(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	sl := s.slices[key]
	if sl == nil {
		return
	}
	delete(s.slices, key)
	s.rv++
	sl = sl.DeepCopy()
	sl.ResourceVersion = strconv.Itoa(s.rv)
	s.history = append(s.history, event{rv: s.rv, typ: "DELETED", slice: sl})
	s.changed.Broadcast()
}

// SetDown takes the server down (true: open watches are cut, requests are
// answered by closing the connection) or brings it back.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.changed.Broadcast()
	s.mu.Unlock()
	if down {
		s.srv.CloseClientConnections()
	}
}

// Requests returns how many lists and watches were served.
func (s *Server) Requests() (lists, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists, s.watches
}

const prefix = "/apis/discovery.k8s.io/v1/namespaces/"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	ns, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, prefix), "/")
	if !strings.HasPrefix(r.URL.Path, prefix) || !ok || rest != "endpointslices" || r.Method != http.MethodGet {
		status(w, http.StatusNotFound, "NotFound", "only endpointslices are served here")
		return
	}
	q := r.URL.Query()
	want, ok := strings.CutPrefix(q.Get("labelSelector"), discoveryv1.LabelServiceName+"=")
	if !ok {
		status(w, http.StatusBadRequest, "BadRequest", "labelSelector must be "+discoveryv1.LabelServiceName+"=NAME")
		return
	}
	match := func(sl *discoveryv1.EndpointSlice) bool {
		return sl.Namespace == ns && sl.Labels[discoveryv1.LabelServiceName] == want
	}
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		if q.Get("sendInitialEvents") == "true" {
			// The informer falls back to a list, as with API servers
			// without streaming lists.
			status(w, http.StatusBadRequest, "BadRequest", "sendInitialEvents is not supported")
			return
		}
		s.watch(w, r, match)
		return
	}
	s.mu.Lock()
	s.lists++
	list := discoveryv1.EndpointSliceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)},
	}
	keys := make([]string, 0, len(s.slices))
	for k := range s.slices {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if sl := s.slices[k]; match(sl) {
			list.Items = append(list.Items, *sl)
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(list)
}

// watch streams the events after the request's resourceVersion until the
// client goes, the server goes down, or timeoutSeconds pass.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, match func(*discoveryv1.EndpointSlice) bool) {
	from, _ := strconv.Atoi(r.URL.Query().Get("resourceVersion"))
	timeout := 5 * time.Minute
	if n, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && n > 0 {
		timeout = time.Duration(n) * time.Second
	}
	ctx := r.Context()
	stop := time.AfterFunc(timeout, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(timeout)
	go func() { // wake the loop below when the client goes
		<-ctx.Done()
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	enc := json.NewEncoder(w)

	s.mu.Lock()
	s.watches++
	next := 0
	for next < len(s.history) && s.history[next].rv <= from {
		next++
	}
	for {
		for ; next < len(s.history); next++ {
			e := s.history[next]
			if !match(e.slice) {
				continue
			}
			obj := e.slice.DeepCopy()
			obj.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
			s.mu.Unlock()
			err := enc.Encode(map[string]any{"type": e.typ, "object": obj})
			if err == nil {
				err = rc.Flush()
			}
			s.mu.Lock()
			if err != nil {
				s.mu.Unlock()
				return
			}
		}
		if s.down || ctx.Err() != nil || !time.Now().Before(deadline) {
			s.mu.Unlock()
			return
		}
		s.changed.Wait()
	}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg,
	})
}

// Endpoint is one endpoint of a slice, for Slice.
type Endpoint struct {
	Addr        string // the address (IPv4 or IPv6, matching the slice)
	Hostname    string // "" = none
	Pod         string // targetRef's pod name; "" = no targetRef
	NotServing  bool
	Terminating bool
}

// Slice builds an EndpointSlice of service in namespace, with one TCP port
// (name, number) and the endpoints given; addressType follows the first
// endpoint's address (IPv4 unless it has a colon).
func Slice(namespace, service, name, portName string, port int32, eps ...Endpoint) *discoveryv1.EndpointSlice {
	proto := corev1.ProtocolTCP
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	for i, e := range eps {
		if i == 0 && net.ParseIP(e.Addr) != nil && strings.Contains(e.Addr, ":") {
			sl.AddressType = discoveryv1.AddressTypeIPv6
		}
		serving, terminating := !e.NotServing, e.Terminating
		ready := serving && !terminating
		ep := discoveryv1.Endpoint{
			Addresses:  []string{e.Addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		}
		if e.Hostname != "" {
			h := e.Hostname
			ep.Hostname = &h
		}
		if e.Pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: e.Pod}
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}
