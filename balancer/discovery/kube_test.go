package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"
	"github.com/ringlb/ringlb/internal/testutil/kubetest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

var appPort = KubeService{Service: "app", Namespace: "prod", Port: "http"}

func TestSliceRecords(t *testing.T) {
	ep := func(addr, host, pod string) kubetest.Endpoint {
		return kubetest.Endpoint{Addr: addr, Hostname: host, Pod: pod}
	}
	term := kubetest.Endpoint{Addr: "10.0.0.5", Pod: "web-5", Terminating: true}
	gone := kubetest.Endpoint{Addr: "10.0.0.6", Pod: "web-6", NotServing: true, Terminating: true}
	notReady := kubetest.Endpoint{Addr: "10.0.0.7", Pod: "web-7", NotServing: true}
	v4 := kubetest.Slice("prod", "app", "app-a", "http", 8080,
		ep("10.0.0.1", "App-0", "app-0"), // a hostname wins over the pod, lowercased
		ep("10.0.0.2", "", "web-2"),      // a pod without hostname
		ep("10.0.0.3", "", ""),           // neither: the address
		term, gone, notReady,
		ep("10.0.0.9", "", "dual"), // also in the IPv6 slice: the IPv4 address wins
	)
	v6 := kubetest.Slice("prod", "app", "app-b", "http", 8080,
		ep("fd00::9", "", "dual"),
		ep("fd00::4", "", ""),
	)
	otherPort := kubetest.Slice("prod", "app", "app-c", "metrics", 9090, ep("10.0.0.8", "", "web-8"))
	fqdn := kubetest.Slice("prod", "app", "app-d", "http", 8080, ep("10.0.0.10", "", "web-10"))
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	// The controller moving web-2 between slices: the copy that is not
	// terminating counts.
	moving := kubetest.Slice("prod", "app", "app-e", "http", 8080, kubetest.Endpoint{Addr: "10.0.0.2", Pod: "web-2", Terminating: true})

	got := sliceRecords(decodeSlices(t, v6, otherPort, v4, fqdn, moving), appPort, "cluster.local.")
	want := []record{
		{name: "10.0.0.3:8080", addr: "10.0.0.3:8080"},
		{name: "[fd00::4]:8080", addr: "[fd00::4]:8080"},
		{name: "app-0.app.prod.svc.cluster.local:8080", addr: "10.0.0.1:8080"},
		{name: "dual.prod:8080", addr: "10.0.0.9:8080"},
		{name: "web-2.prod:8080", addr: "10.0.0.2:8080"},
		{name: "web-5.prod:8080", addr: "10.0.0.5:8080", terminating: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("records:\n got %v\nwant %v", got, want)
	}

	// The port by number; a nil serving condition counts as serving.
	byNum := appPort
	byNum.Port = "9090"
	otherPort.Endpoints[0].Conditions = discoveryv1.EndpointConditions{}
	got = sliceRecords(decodeSlices(t, v4, otherPort), byNum, "cluster.local")
	if want := []record{{name: "web-8.prod:9090", addr: "10.0.0.8:9090"}}; !slices.Equal(got, want) {
		t.Errorf("port 9090: got %v, want %v", got, want)
	}
}

// decodeSlices returns what ringlb reads of the slices sl: each encoded in
// JSON as k8s.io/api's own type, decoded by the client's codec into
// ringlb's, as they come from an API server.
func decodeSlices(t testing.TB, sl ...*discoveryv1.EndpointSlice) []*endpointSlice {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := addSliceTypes(scheme); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	out := make([]*endpointSlice, len(sl))
	for i, s := range sl {
		s = s.DeepCopy()
		s.APIVersion, s.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		o, _, err := dec.Decode(b, nil, nil)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		es, ok := o.(*endpointSlice)
		if !ok {
			t.Fatalf("decoded %T, want *endpointSlice", o)
		}
		out[i] = es
	}
	return out
}

// The slice type ringlb declares reads what k8s.io/api's carries, and its
// deep copy shares nothing with the original.
func TestEndpointSliceType(t *testing.T) {
	host := "app-0"
	src := kubetest.Slice("prod", "app", "app-a", "http", 8080,
		kubetest.Endpoint{Addr: "10.0.0.1", Hostname: host, Pod: "app-0", Terminating: true},
		kubetest.Endpoint{Addr: "fd00::2", Pod: "web-2", NotServing: true})
	got := decodeSlices(t, src)[0]
	if got.Name != "app-a" || got.Namespace != "prod" || got.Labels[serviceNameLabel] != "app" || got.AddressType != string(src.AddressType) {
		t.Errorf("metadata: got %+v", got.ObjectMeta)
	}
	if len(got.Endpoints) != 2 || len(got.Ports) != 1 {
		t.Fatalf("got %d endpoints, %d ports", len(got.Endpoints), len(got.Ports))
	}
	e0, e1 := got.Endpoints[0], got.Endpoints[1]
	if e0.Addresses[0] != "10.0.0.1" || e0.Hostname == nil || *e0.Hostname != host || e0.TargetRef == nil || e0.TargetRef.Kind != "Pod" || e0.TargetRef.Name != "app-0" ||
		e0.Conditions.Serving == nil || !*e0.Conditions.Serving || e0.Conditions.Terminating == nil || !*e0.Conditions.Terminating {
		t.Errorf("endpoint 0: %+v %+v", e0, e0.Conditions)
	}
	if e1.Addresses[0] != "fd00::2" || e1.Hostname != nil || e1.Conditions.Serving == nil || *e1.Conditions.Serving {
		t.Errorf("endpoint 1: %+v", e1)
	}
	p := got.Ports[0]
	if p.Name == nil || *p.Name != "http" || p.Port == nil || *p.Port != 8080 || p.Protocol == nil || *p.Protocol != "TCP" {
		t.Errorf("port: %+v", p)
	}
	c := got.DeepCopyObject().(*endpointSlice)
	*c.Endpoints[0].Hostname = "other"
	c.Endpoints[0].Addresses[0] = "10.9.9.9"
	*c.Ports[0].Port = 1
	c.Endpoints[0].TargetRef.Name = "x"
	c.Labels["x"] = "y"
	if *got.Endpoints[0].Hostname != host || got.Endpoints[0].Addresses[0] != "10.0.0.1" || *got.Ports[0].Port != 8080 ||
		got.Endpoints[0].TargetRef.Name != "app-0" || got.Labels["x"] != "" {
		t.Error("the deep copy shares memory with the original")
	}
	l := (&endpointSliceList{Items: []endpointSlice{*got}}).DeepCopyObject().(*endpointSliceList)
	l.Items[0].Endpoints[0].Addresses[0] = "10.8.8.8"
	if got.Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Error("the list's deep copy shares memory with the original")
	}
}

// kubeHarness is a Discoverer on a kubetest API server.
type kubeHarness struct {
	api     *kubetest.Server
	d       *Discoverer
	clock   *clock
	updates chan Update
	logs    *lockedBuffer
	opts    Options
}

func newKubeHarness(t *testing.T, confirm int, extra ...Source) *kubeHarness {
	t.Helper()
	h := &kubeHarness{api: kubetest.New(t), clock: &clock{t: t0}, updates: make(chan Update, 64), logs: &lockedBuffer{}}
	h.opts = Options{
		Interval: time.Hour, Timeout: 2 * time.Second, RemoveAfter: 5 * time.Minute, Confirm: confirm,
		Sources:    append([]Source{{Kubernetes: appPort, Scheme: "http", Protocol: "http1", Weight: 1}}, extra...),
		Kubeconfig: h.api.Kubeconfig(t, t.TempDir()),
		OnChange:   func(u Update) { h.updates <- u },
		Logger:     slog.New(slog.NewTextHandler(h.logs, nil)),
		Now:        h.clock.Now,
	}
	d, err := New(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	return h
}

func (h *kubeHarness) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// next waits for the next update.
func (h *kubeHarness) next(t *testing.T) Update {
	t.Helper()
	select {
	case u := <-h.updates:
		return u
	case <-time.After(10 * time.Second):
		t.Fatalf("no update; log:\n%s", h.logs.Take())
		return Update{}
	}
}

// until waits for an update whose members satisfy ok.
func (h *kubeHarness) until(t *testing.T, what string, ok func([]Member) bool) []Member {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case u := <-h.updates:
			if ok(u.Members) {
				return u.Members
			}
		case <-deadline:
			t.Fatalf("no update with %s; members %v; log:\n%s", what, h.d.Members(), h.logs.Take())
		}
	}
}

func describe(ms []Member) string {
	var b []string
	for _, m := range ms {
		s := m.Name + "=" + m.URL
		if m.Absent {
			s += " absent"
		}
		if m.Terminating {
			s += " terminating"
		}
		b = append(b, s)
	}
	return strings.Join(b, ", ")
}

func statefulSlice(name string, eps ...kubetest.Endpoint) *discoveryv1.EndpointSlice {
	return kubetest.Slice("prod", "app", name, "http", 8080, eps...)
}

func pod(i int, addr string) kubetest.Endpoint {
	return kubetest.Endpoint{Addr: addr, Hostname: fmt.Sprintf("app-%d", i), Pod: fmt.Sprintf("app-%d", i)}
}

func TestKubeWatch(t *testing.T) {
	h := newKubeHarness(t, 3)
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), pod(1, "10.1.0.2"), pod(2, "10.1.0.3"), pod(3, "10.1.0.4")))
	h.run(t)

	ms := h.next(t).Members
	want := "app-0.app.prod.svc.cluster.local:8080=http://10.1.0.1:8080, app-1.app.prod.svc.cluster.local:8080=http://10.1.0.2:8080, " +
		"app-2.app.prod.svc.cluster.local:8080=http://10.1.0.3:8080, app-3.app.prod.svc.cluster.local:8080=http://10.1.0.4:8080"
	if got := describe(ms); got != want {
		t.Fatalf("first members:\n got %s\nwant %s", got, want)
	}
	if !ms[0].Initial || ms[0].Source != "kubernetes:prod/app:http" {
		t.Errorf("first member %+v: want Initial and source kubernetes:prod/app:http", ms[0])
	}

	// A pod being deleted: serving and terminating.
	p1 := pod(1, "10.1.0.2")
	p1.Terminating = true
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), p1, pod(2, "10.1.0.3"), pod(3, "10.1.0.4")))
	u := h.next(t)
	if got := describe(u.Members); !strings.Contains(got, "app-1.app.prod.svc.cluster.local:8080=http://10.1.0.2:8080 terminating") {
		t.Fatalf("after terminating: %s", got)
	}
	if len(u.Events) != 1 || u.Events[0].Kind != Terminating {
		t.Errorf("events %v, want one terminating", u.Events)
	}
	// Then not serving: absent.
	p1.NotServing = true
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), p1, pod(2, "10.1.0.3"), pod(3, "10.1.0.4")))
	ms = h.until(t, "app-1 absent", func(ms []Member) bool { return ms[1].Absent })
	if len(ms) != 4 {
		t.Errorf("members %s: want app-1 kept, absent", describe(ms))
	}
	// Re-created with a new address and the same name: back, readdressed.
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), pod(1, "10.1.0.22"), pod(2, "10.1.0.3"), pod(3, "10.1.0.4")))
	u = h.next(t)
	if got := describe(u.Members); !strings.Contains(got, "app-1.app.prod.svc.cluster.local:8080=http://10.1.0.22:8080,") || strings.Contains(got, "absent") || strings.Contains(got, "terminating") {
		t.Fatalf("after re-creation: %s", got)
	}

	// The API server goes down: the members stay, the error shows.
	h.api.SetDown(true)
	testenv.Eventually(t, 10*time.Second, func() error {
		st := h.d.Status()[0]
		if st.LastError == "" || st.Errors == 0 {
			return fmt.Errorf("status %+v: want an error", st)
		}
		return nil
	})
	if got, st := describe(h.d.Members()), h.d.Status()[0]; st.Members != 4 || strings.Contains(got, "absent") {
		t.Errorf("while down: %s, status %+v: want the 4 members kept", got, st)
	}
	h.d.Resolve() // a poll while down keeps the answer too
	h.api.SetDown(false)
	testenv.Eventually(t, 30*time.Second, func() error {
		if st := h.d.Status()[0]; st.LastError != "" {
			return fmt.Errorf("status %+v: want recovered", st)
		}
		return nil
	})
	// The watch works again.
	h.api.Delete("prod", "app-1")
	h.api.Set(statefulSlice("app-2", pod(0, "10.1.0.1"), pod(1, "10.1.0.22"), pod(2, "10.1.0.3")))
	ms = h.until(t, "app-3 absent", func(ms []Member) bool { return ms[3].Absent })
	if got := describe(ms); strings.Count(got, "absent") != 1 {
		t.Errorf("after the move: %s", got)
	}
	if lists, watches := h.api.Requests(); lists < 2 || watches < 2 {
		t.Errorf("%d lists, %d watches: want a list and a watch again after the outage", lists, watches)
	}
}

func TestKubeMassRemoval(t *testing.T) {
	h := newKubeHarness(t, 3)
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), pod(1, "10.1.0.2"), pod(2, "10.1.0.3"), pod(3, "10.1.0.4")))
	h.run(t)
	if n := len(h.next(t).Members); n != 4 {
		t.Fatalf("%d members, want 4", n)
	}
	// One of four left: guarded until it has held for confirm × interval
	// (3h on the harness's clock), however many times it is read.
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1")))
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(h.logs.Take(), "applied once that has held for 3h0m0s") {
			return fmt.Errorf("no guarded line yet")
		}
		return nil
	})
	h.clock.Advance(2 * time.Hour)
	h.d.Resolve()
	h.api.Set(statefulSlice("app-1", pod(2, "10.1.0.3"))) // another short answer: the wait goes on
	h.d.Resolve()
	select {
	case u := <-h.updates:
		t.Fatalf("applied before confirm × interval: %s", describe(u.Members))
	case <-time.After(300 * time.Millisecond):
	}
	h.clock.Advance(time.Hour)
	h.d.Resolve()
	ms := h.next(t).Members
	if got := describe(ms); strings.Count(got, "absent") != 3 || !strings.Contains(got, "app-2.app.prod.svc.cluster.local:8080=http://10.1.0.3:8080,") {
		t.Errorf("after 3h: %s, want all but app-2 absent", got)
	}
}

// A source that is not running lists the slices once (ringlb simulate).
func TestKubeListOnce(t *testing.T) {
	h := newKubeHarness(t, 3)
	h.api.Set(statefulSlice("app-1", pod(0, "10.1.0.1"), pod(1, "10.1.0.2")))
	if !h.d.Poll(context.Background()) {
		t.Fatal("Poll: no change")
	}
	if got := len(h.d.Members()); got != 2 {
		t.Errorf("%d members, want 2", got)
	}
	if lists, watches := h.api.Requests(); lists != 1 || watches != 0 {
		t.Errorf("%d lists and %d watches, want 1 list", lists, watches)
	}
	h.api.SetDown(true)
	h.d.Poll(context.Background())
	if st := h.d.Status()[0]; st.LastError == "" || st.Errors != 1 || st.Members != 2 {
		t.Errorf("status %+v: want one error and the members kept", st)
	}
}

func TestKubeNotInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	d, err := New(Options{
		Interval: time.Hour, Timeout: time.Second, Confirm: 1,
		Sources: []Source{{Kubernetes: appPort, Scheme: "http", Weight: 1}},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Poll(context.Background())
	if st := d.Status()[0]; !strings.Contains(st.LastError, "not in a pod") {
		t.Errorf("status %+v: want the in-cluster error", st)
	}
}

// A StatefulSet behind a headless Service: SRV discovery (as CoreDNS
// answers it) and the EndpointSlices give the same member names, so a
// fleet switched from one source to the other moves no key.
func TestKubeNamesMatchSRV(t *testing.T) {
	z := dnstest.New(t)
	const srvName = "_http._tcp.app.prod.svc.cluster.local"
	var srv []string
	api := kubetest.New(t)
	var eps []kubetest.Endpoint
	for i := range 4 {
		target := fmt.Sprintf("app-%d.app.prod.svc.cluster.local.", i)
		addr := fmt.Sprintf("10.2.0.%d", i+1)
		srv = append(srv, target+":8080")
		z.SetAddrs(target, addr)
		eps = append(eps, pod(i, addr))
	}
	z.SetSRV(srvName, srv...)
	api.Set(statefulSlice("app-x", eps...))

	names := func(src Source) []string {
		d, err := New(Options{
			Resolver: z.Addr, Interval: time.Hour, Timeout: 2 * time.Second, Confirm: 1,
			Sources: []Source{src}, Kubeconfig: api.Kubeconfig(t, t.TempDir()), Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Poll(context.Background())
		var out []string
		for _, m := range d.Members() {
			out = append(out, m.Name+" "+m.URL)
		}
		return out
	}
	bySRV := names(Source{SRV: srvName, Scheme: "http", Weight: 1})
	byKube := names(Source{Kubernetes: KubeService{Service: "app", Namespace: "prod", Port: "8080"}, Scheme: "http", Weight: 1})
	if len(bySRV) != 4 || !slices.Equal(bySRV, byKube) {
		t.Errorf("SRV members %v\nkubernetes members %v: want the same 4", bySRV, byKube)
	}
}

// BenchmarkKubeAnswer1000 is this package's share of applying one change
// to a 1000-endpoint Service: reading 10 slices of 100 into an answer and
// applying it to the membership (one endpoint readdressed each time).
func BenchmarkKubeAnswer1000(b *testing.B) {
	real := make([]*discoveryv1.EndpointSlice, 10)
	for s := range real {
		var eps []kubetest.Endpoint
		for i := range 100 {
			n := s*100 + i
			eps = append(eps, kubetest.Endpoint{Addr: fmt.Sprintf("10.3.%d.%d", n/250, n%250+1), Hostname: fmt.Sprintf("big-%d", n)})
		}
		real[s] = kubetest.Slice("prod", "app", fmt.Sprintf("big-%d", s), "http", 8080, eps...)
	}
	sl := decodeSlices(b, real...)
	st := newSourceState(Source{Kubernetes: appPort, Scheme: "http", Weight: 1})
	p := policy{removeAfter: time.Hour, confirm: 3, confirmFor: 15 * time.Second}
	st.answer(p, sliceRecords(sl, appPort, "cluster.local"), t0, nil)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sl[0].Endpoints[0].Addresses[0] = fmt.Sprintf("10.4.0.%d", i%2+1)
		if changed, _ := st.answer(p, sliceRecords(sl, appPort, "cluster.local"), t0, nil); !changed {
			b.Fatal("no change")
		}
	}
}
