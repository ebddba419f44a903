package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/discovery"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

// A 1 000-endpoint Service (10 slices of 100, written as a controller
// would for a Service without selector): how long the first sync takes
// (Balancer started → 1 000 members installed) and how long one endpoint's
// change takes to be applied (the slice updated on the API server → the
// snapshot with the new member list installed), measured over 20 changes.
// The addresses are never dialled.
func TestPerf1000(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	const perSlice, nSlices = 100, 10
	sl := make([]*discoveryv1.EndpointSlice, nSlices)
	for s := range nSlices {
		port, name, proto := int32(8080), "http", corev1.ProtocolTCP
		sl[s] = &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", s), Labels: map[string]string{
				discoveryv1.LabelServiceName: "big", discoveryv1.LabelManagedBy: "ringlb-test"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		}
		for i := range perSlice {
			n := s*perSlice + i
			host := fmt.Sprintf("big-%d", n)
			sl[s].Endpoints = append(sl[s].Endpoints, discoveryv1.Endpoint{
				Addresses: []string{fmt.Sprintf("198.18.%d.%d", n/250, n%250+1)}, Hostname: &host,
			})
		}
		var err error
		if sl[s], err = cp.client.DiscoveryV1().EndpointSlices("prod").Create(ctx, sl[s], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	opts := balancer.Options{
		PoolOptions: balancer.PoolOptions{
			Ring:     options.Ring{PointsPerWeight: 160},
			Hash:     options.Hash{Key: []key.Source{{Kind: key.Header, Name: "X-User-ID"}}, OnMissing: "random"},
			Timeouts: options.Timeouts{Dial: time.Second, ResponseHeader: time.Second, IdleConn: time.Second},
			Discovery: &discovery.Options{
				Interval: time.Hour, Timeout: 5 * time.Second, RemoveAfter: time.Hour, Confirm: 3,
				Kubeconfig: cp.kubeconfig,
				Sources: []discovery.Source{{Kubernetes: discovery.KubeService{Service: "big", Namespace: "prod", Port: "http"},
					Scheme: "http", Protocol: "http1", Weight: 1}},
			},
		},
	}
	start := time.Now()
	logs := &lockedBuf{}
	b, err := balancer.New(opts, metrics.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ringlb's log:\n%s", logs)
		}
	})
	waitMembers(t, b, func(ms []balancer.MemberURL) bool { return len(ms) == nSlices*perSlice })
	initial := time.Since(start)

	var lat []time.Duration
	for c := range 20 {
		s := sl[c%nSlices].DeepCopy()
		addr := fmt.Sprintf("198.19.0.%d", c+1)
		s.Endpoints[c].Addresses = []string{addr}
		want := fmt.Sprintf("http://%s:8080", addr)
		who := *s.Endpoints[c].Hostname + ".big.prod.svc.cluster.local:8080"
		t0 := time.Now()
		if sl[c%nSlices], err = cp.client.DiscoveryV1().EndpointSlices("prod").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitMembers(t, b, func(ms []balancer.MemberURL) bool {
			i := slices.IndexFunc(ms, func(m balancer.MemberURL) bool { return m.Name == who })
			return i >= 0 && ms[i].URL.String() == want
		})
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	t.Logf("1000 endpoints: initial sync %s; one endpoint changed → snapshot installed: median %s, max %s (20 changes)",
		initial.Round(time.Millisecond), lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
}

// waitMembers waits, on the Balancer's membership signal, until ok holds
// for its members (at most 30 s).
func waitMembers(t *testing.T, b *balancer.Balancer, ok func([]balancer.MemberURL) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !ok(b.Members()) {
		select {
		case <-b.MembersChanged():
		case <-time.After(10 * time.Millisecond): // a signal taken by nobody else is kept; this is a safety net
		case <-deadline:
			t.Fatalf("members not there after 30s: %d members", len(b.Members()))
		}
	}
}
