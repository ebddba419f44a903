package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/kubetest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// kubeFleet is n backends on loopback, each the one endpoint of its own
// EndpointSlice of Service prod/app (port "http", each slice its own port
// number, as the controller makes them for pods with different ports).
type kubeFleet struct {
	api *kubetest.Server
	bes []*ringlbtest.DiscoveredBackend
}

func newKubeFleet(t *testing.T, n int) *kubeFleet {
	f := &kubeFleet{api: kubetest.New(t)}
	for i := range n {
		be := ringlbtest.NewDiscoveredBackend(t, "")
		be.Name = fmt.Sprintf("app-%d.app.prod.svc.cluster.local:%d", i, f.port(be))
		f.bes = append(f.bes, be)
		f.set(i, kubetest.Endpoint{})
	}
	return f
}

func (f *kubeFleet) port(be *ringlbtest.DiscoveredBackend) int32 {
	_, p, _ := net.SplitHostPort(be.Srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// set publishes backend i's slice with its endpoint's conditions from e.
func (f *kubeFleet) set(i int, e kubetest.Endpoint) {
	e.Addr, e.Hostname, e.Pod = "127.0.0.1", fmt.Sprintf("app-%d", i), fmt.Sprintf("app-%d", i)
	f.api.Set(kubetest.Slice("prod", "app", fmt.Sprintf("app-%d", i), "http", f.port(f.bes[i]), e))
}

func (f *kubeFleet) yaml(t *testing.T) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
hash:
  key: [{header: X-User-ID}]
  on_missing: reject
upstreams: []
discovery:
  kubeconfig: %s
  interval: 10s
  timeout: 5s
  remove_after: 1h
  sources:
    - kubernetes: {service: app, namespace: prod, port: http}
`, f.api.Kubeconfig(t, t.TempDir()))
}

// validate checks a kubernetes source and its kubeconfig without asking
// the API server anything.
func TestValidateKubernetes(t *testing.T) {
	f := newKubeFleet(t, 1)
	cfg := ringlbtest.WriteConfig(t, f.yaml(t))
	code, out, errOut := runCmd(t, "validate", "-config", cfg)
	if code != exitOK || !strings.Contains(out, "discovery every 10s from kubernetes:prod/app:http (not resolved") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if lists, watches := f.api.Requests(); lists+watches != 0 {
		t.Errorf("validate asked the API server: %d lists, %d watches", lists, watches)
	}
}

// simulate lists the slices once, as it resolves DNS once.
func TestSimulateKubernetes(t *testing.T) {
	f := newKubeFleet(t, 3)
	cfg := ringlbtest.WriteConfig(t, f.yaml(t))
	code, out, errOut := runCmd(t, "simulate", "-config", cfg, "-keys", "3000")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "discovery: kubernetes:prod/app:http: 3 members\n") || !strings.Contains(out, "3000 keys over 3 upstreams") {
		t.Errorf("simulate:\n%s", out)
	}
	for _, be := range f.bes {
		if !strings.Contains(out, be.Name) {
			t.Errorf("member %s missing:\n%s", be.Name, out)
		}
	}
	if lists, watches := f.api.Requests(); lists != 1 || watches != 0 {
		t.Errorf("%d lists, %d watches: want one list", lists, watches)
	}
}

// serve watches the slices: members come and go within a second, and an
// API server that stops answering changes nothing but the error shown on
// /debug/ring and counted in ringlb_discovery_errors_total (the recovery
// is tested in package discovery).
func TestServeKubernetes(t *testing.T) {
	f := newKubeFleet(t, 3)
	lb := startRinglb(t, ringlbtest.WriteConfig(t, f.yaml(t)))
	testenv.Eventually(t, 10*time.Second, memberCount(t, lb.admin, 3))
	v := getDiscView(t, lb.admin)
	for i, u := range v.Upstreams {
		if u.Name != f.bes[i].Name || u.URL != f.bes[i].Srv.URL || u.Source != "kubernetes:prod/app:http" {
			t.Errorf("upstream %d: %+v, want %s at %s", i, u, f.bes[i].Name, f.bes[i].Srv.URL)
		}
	}

	// Terminating, still serving: drained (state drain on /upstreams), not absent.
	f.set(2, kubetest.Endpoint{Terminating: true})
	testenv.Eventually(t, 5*time.Second, func() error {
		res, err := ringlbtest.AdminClient.Get(lb.admin + "/upstreams/" + f.bes[2].Name)
		if err != nil {
			return err
		}
		var u struct{ State string }
		err = json.NewDecoder(res.Body).Decode(&u)
		res.Body.Close()
		if err != nil || u.State != "drain" {
			return fmt.Errorf("%s: state %q, %v", f.bes[2].Name, u.State, err)
		}
		return nil
	})
	waitKubeMember(t, lb.admin, f.bes[2].Name, func(absent bool) bool { return !absent })
	f.set(2, kubetest.Endpoint{})

	// Not serving: absent at once (the interval is 10s: only the watch can tell).
	f.set(1, kubetest.Endpoint{NotServing: true})
	waitKubeMember(t, lb.admin, f.bes[1].Name, func(absent bool) bool { return absent })
	f.set(1, kubetest.Endpoint{})
	waitKubeMember(t, lb.admin, f.bes[1].Name, func(absent bool) bool { return !absent })

	f.api.SetDown(true)
	testenv.Eventually(t, 20*time.Second, func() error {
		v := getDiscView(t, lb.admin)
		if len(v.Discovery) != 1 || v.Discovery[0].LastError == "" {
			return fmt.Errorf("no error shown: %+v", v.Discovery)
		}
		if errs := ringlbtest.MetricValue(t, lb.admin, `ringlb_discovery_errors_total{source="kubernetes:prod/app:http"}`); errs < 1 {
			return fmt.Errorf("ringlb_discovery_errors_total = %v", errs)
		}
		return nil
	})
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 50 {
		req, _ := http.NewRequest(http.MethodGet, lb.proxy+"/", nil)
		req.Header.Set("X-User-ID", fmt.Sprint("user-", i))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d while the API server is down: %d", i, res.StatusCode)
		}
	}
	if v := getDiscView(t, lb.admin); len(v.Upstreams) != 3 || v.Discovery[0].Members != 3 {
		t.Errorf("while down: %+v", v)
	}
}

func waitKubeMember(t *testing.T, admin, name string, ok func(absent bool) bool) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		for _, u := range getDiscView(t, admin).Upstreams {
			if u.Name == name {
				if ok(u.Absent) {
					return nil
				}
				return fmt.Errorf("%s absent=%v", name, u.Absent)
			}
		}
		return fmt.Errorf("%s not on the ring", name)
	})
}
