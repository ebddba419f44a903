package examples

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"

	"gopkg.in/yaml.v3"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// repoRoot is the module root, relative to this package's directory (the
// working directory of its tests).
const repoRoot = ".."

// specMetrics are the metric names ringlb exports: the README's Metrics
// table and the metrics its Discovery and Hold sections add.
var specMetrics = []string{
	"ringlb_requests_total",
	"ringlb_request_duration_seconds",
	"ringlb_upstream_inflight",
	"ringlb_upstream_available",
	"ringlb_breaker_state",
	"ringlb_ejections_total",
	"ringlb_overflow_total",
	"ringlb_retries_total",
	"ringlb_no_upstream_total",
	"ringlb_ring_info",
	"ringlb_config_reloads_total",
	"ringlb_config_last_reload_success",
	"ringlb_tls_cert_not_after_seconds",
	"ringlb_discovery_members",
	"ringlb_discovery_updates_total",
	"ringlb_discovery_errors_total",
	"ringlb_hold_keys",
	"ringlb_held_total",
	"ringlb_upstream_absent",
	"ringlb_upstream_state",
	"ringlb_hold_share_errors_total",
	"ringlb_hold_share_lookups_total",
	"ringlb_no_route_total",
}

// specHistograms are the histograms among specMetrics: Prometheus exposes
// them as NAME_bucket, NAME_sum and NAME_count.
var specHistograms = []string{"ringlb_request_duration_seconds"}

// TestConfigsLoad checks that every example config, the config embedded in
// the Kubernetes ConfigMap and the repository's default config.yaml pass
// config.Load: the schema is strict, so a renamed field breaks them. A
// config with a tls block is loaded from a copy with a generated pair next
// to it (withTLSPair).
func TestConfigsLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("configs", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yml, err := filepath.Glob(filepath.Join("configs", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, yml...)
	if len(files) < 4 {
		t.Fatalf("configs/: found %d YAML files %q, want at least 4", len(files), files)
	}
	files = append(files, filepath.Join(repoRoot, "config.yaml"))

	for _, m := range kubernetesManifests {
		k8s, err := configMapConfig(filepath.Join("kubernetes", m), "ringlb", "config.yaml")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "kubernetes-"+strings.TrimSuffix(m, ".yaml")+"-configmap-config.yaml")
		if err := os.WriteFile(path, k8s, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}

	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := config.Load(withTLSPair(t, f)); err != nil {
				t.Errorf("config.Load(%q):\n%v", f, err)
			}
		})
	}
}

// TestKubernetesConfigListensOnAllInterfaces checks the container config
// binds 0.0.0.0: loopback inside a pod is unreachable by the Service and
// by the kubelet's probes.
func TestKubernetesConfigListensOnAllInterfaces(t *testing.T) {
	for _, m := range kubernetesManifests {
		t.Run(m, func(t *testing.T) {
			cfg := kubernetesConfig(t, m)
			if cfg.Listen != "0.0.0.0:8080" {
				t.Errorf("listen = %q, want 0.0.0.0:8080", cfg.Listen)
			}
			if cfg.AdminListen != "0.0.0.0:9901" {
				t.Errorf("admin_listen = %q, want 0.0.0.0:9901", cfg.AdminListen)
			}
		})
	}
}

// TestKubernetesShutdown: on a rollout the ringlb pods keep accepting for
// shutdown_delay (5s, while the endpoint's removal propagates), then
// drain for up to shutdown_timeout; terminationGracePeriodSeconds must
// cover both, or the kubelet kills ringlb mid-drain. The manifests also
// keep upstream names internal (no upstream_header).
func TestKubernetesShutdown(t *testing.T) {
	for _, m := range kubernetesManifests {
		t.Run(m, func(t *testing.T) {
			cfg := kubernetesConfig(t, m)
			if cfg.ShutdownDelay != 5*time.Second {
				t.Errorf("shutdown_delay = %s, want 5s", cfg.ShutdownDelay)
			}
			if cfg.UpstreamHeader != "" {
				t.Errorf("upstream_header = %q: upstream names reach every client", cfg.UpstreamHeader)
			}
			f, err := os.Open(filepath.Join("kubernetes", m))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			dec := yaml.NewDecoder(f)
			found := false
			for {
				var doc struct {
					Metadata struct {
						Name string `yaml:"name"`
					} `yaml:"metadata"`
					Spec struct {
						Template struct {
							Spec struct {
								Grace      *int `yaml:"terminationGracePeriodSeconds"`
								Containers []struct {
									Image string `yaml:"image"`
								} `yaml:"containers"`
							} `yaml:"spec"`
						} `yaml:"template"`
					} `yaml:"spec"`
				}
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				ps := doc.Spec.Template.Spec
				if !slices.ContainsFunc(ps.Containers, func(c struct {
					Image string `yaml:"image"`
				}) bool {
					return isRinglbImage(c.Image)
				}) {
					continue
				}
				found = true
				need := cfg.ShutdownDelay + cfg.ShutdownTimeout
				if ps.Grace == nil || time.Duration(*ps.Grace)*time.Second <= need {
					t.Errorf("%s: terminationGracePeriodSeconds %v, want more than shutdown_delay + shutdown_timeout (%s)", doc.Metadata.Name, ps.Grace, need)
				}
			}
			if !found {
				t.Error("no pod template runs the ringlb image")
			}
		})
	}
}

// kubernetesManifests are the files of examples/kubernetes/, each a whole
// deployment with a ConfigMap "ringlb" holding config.yaml.
var kubernetesManifests = []string{"ringlb.yaml", "discovery.yaml", "endpointslices.yaml"}

// TestKubernetesManifestsListed: a new manifest gets the checks above.
func TestKubernetesManifestsListed(t *testing.T) {
	found, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range found {
		found[i] = filepath.Base(found[i])
	}
	want := slices.Sorted(slices.Values(kubernetesManifests))
	if !slices.Equal(found, want) {
		t.Errorf("examples/kubernetes holds %q; kubernetesManifests lists %q", found, want)
	}
}

// kubernetesConfig loads the config in the ConfigMap ringlb of the manifest
// examples/kubernetes/NAME.
func kubernetesConfig(t *testing.T, name string) *config.Config {
	t.Helper()
	data, err := configMapConfig(filepath.Join("kubernetes", name), "ringlb", "config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return cfg
}

// k8sObject is the part of a Kubernetes object the discovery example's
// checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		ClusterIP   string           `yaml:"clusterIP"`
		Selector    yaml.Node        `yaml:"selector"` // a Service's map, a workload's matchLabels
		ServiceName string           `yaml:"serviceName"`
		Ports       []k8sServicePort `yaml:"ports"`
		Template    k8sPodTemplate   `yaml:"template"`
	} `yaml:"spec"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Protocol   string `yaml:"protocol"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Containers []struct {
			Name  string `yaml:"name"`
			Ports []struct {
				Name          string `yaml:"name"`
				ContainerPort int    `yaml:"containerPort"`
			} `yaml:"ports"`
		} `yaml:"containers"`
	} `yaml:"spec"`
}

// TestKubernetesDiscoveryMatchesService: the SRV name ringlb asks for in
// examples/kubernetes/discovery.yaml is the one Kubernetes' DNS publishes
// for the manifest's headless Service (_PORTNAME._tcp.SERVICE.NAMESPACE.svc.
// cluster.local, one target per ready pod), that Service governs the
// StatefulSet and selects its pods, and its named port reaches the pods'
// port.
func TestKubernetesDiscoveryMatchesService(t *testing.T) {
	cfg := kubernetesConfig(t, "discovery.yaml")
	if cfg.Discovery == nil || len(cfg.Discovery.Sources) != 1 || cfg.Discovery.Sources[0].SRV == "" {
		t.Fatalf("want one srv source in the discovery block, got %+v", cfg.Discovery)
	}
	if len(cfg.Upstreams) != 0 {
		t.Errorf("upstreams: %d static members, want none", len(cfg.Upstreams))
	}
	srv := cfg.Discovery.Sources[0].SRV
	m := regexp.MustCompile(`^_([a-z0-9-]+)\._(tcp)\.([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$`).FindStringSubmatch(srv)
	if m == nil {
		t.Fatalf("srv %q is not _PORT._tcp.SERVICE.NAMESPACE.svc.cluster.local", srv)
	}
	portName, service := m[1], m[3]

	f, err := os.Open(filepath.Join("kubernetes", "discovery.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(f)
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	svc, ok := objs["Service/"+service]
	if !ok {
		t.Fatalf("srv %q names the Service %q; the manifest has none", srv, service)
	}
	if svc.Spec.ClusterIP != "None" {
		t.Errorf("Service %s: clusterIP %q, want None (headless: SRV targets are then the pods)", service, svc.Spec.ClusterIP)
	}
	var port *k8sServicePort
	for i, p := range svc.Spec.Ports {
		if p.Name == portName {
			port = &svc.Spec.Ports[i]
		}
	}
	if port == nil {
		t.Fatalf("Service %s has no port named %q, which the SRV name %q needs", service, portName, srv)
	}
	if port.Protocol != "" && port.Protocol != "TCP" {
		t.Errorf("Service %s port %s: protocol %s; _tcp needs TCP", service, portName, port.Protocol)
	}

	var sts *k8sObject
	for _, o := range objs {
		if o.Kind == "StatefulSet" && o.Spec.ServiceName == service {
			sts = &o
		}
	}
	if sts == nil {
		t.Fatalf("no StatefulSet has serviceName %q: its pods would get no stable DNS names under it", service)
	}
	var sel map[string]string
	if err := svc.Spec.Selector.Decode(&sel); err != nil || len(sel) == 0 {
		t.Fatalf("Service %s: selector %v: %v", service, sel, err)
	}
	for k, v := range sel {
		if sts.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s; StatefulSet %s's pods are labelled %v", service, k, v, sts.Metadata.Name, sts.Spec.Template.Metadata.Labels)
		}
	}
	podPort := 0
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port.TargetPort || strconv.Itoa(p.ContainerPort) == port.TargetPort {
				podPort = p.ContainerPort
			}
		}
	}
	if podPort == 0 {
		t.Errorf("Service %s port %s targets %q; no container of StatefulSet %s has that port", service, portName, port.TargetPort, sts.Metadata.Name)
	}
}

// configMapConfig returns data[key] of the ConfigMap called name in a
// multi-document Kubernetes manifest.
func configMapConfig(manifest, name, key string) ([]byte, error) {
	f, err := os.Open(manifest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Data map[string]string `yaml:"data"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil, errors.New(manifest + ": no ConfigMap " + name + " with data." + key)
		}
		if err != nil {
			return nil, errors.New(manifest + ": " + err.Error())
		}
		if doc.Kind == "ConfigMap" && doc.Metadata.Name == name {
			v, ok := doc.Data[key]
			if !ok {
				return nil, errors.New(manifest + ": ConfigMap " + name + " has no data." + key)
			}
			return []byte(v), nil
		}
	}
}

// promtool finds promtool on PATH. Without it the test fails under CI (env
// CI set) and is skipped elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.SkipExternal(t, "promtool", "not on PATH (Debian: apt-get install prometheus)")
	}
	return p
}

// TestPromtool runs promtool over the Prometheus config and alert rules.
func TestPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "config", filepath.Join("prometheus", "prometheus.yml")},
		{"check", "config", filepath.Join("prometheus", "kubernetes.yml")},
		{"check", "rules", filepath.Join("prometheus", "alerts.yml")},
		{"test", "rules", filepath.Join("prometheus", "alerts_test.yml")},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			if err != nil && bytes.Contains(out, []byte("field kubernetes_sd_configs not found")) {
				// Debian's Prometheus is built without Kubernetes service
				// discovery: check the rest of the file with the discovery
				// replaced by a static target.
				data, rerr := os.ReadFile(args[2])
				if rerr != nil {
					t.Fatal(rerr)
				}
				static := regexp.MustCompile(`(?m)^    kubernetes_sd_configs:\n      - role: pod\n`).ReplaceAll(data,
					[]byte("    static_configs:\n      - targets: [\"10.0.0.1:9901\"]\n"))
				if bytes.Equal(static, data) {
					t.Fatalf("promtool cannot read Kubernetes discovery, and %s has no `kubernetes_sd_configs: [{role: pod}]` to replace", args[2])
				}
				tmp := filepath.Join(t.TempDir(), filepath.Base(args[2]))
				os.WriteFile(tmp, static, 0o644)
				os.WriteFile(filepath.Join(filepath.Dir(tmp), "alerts.yml"), must(os.ReadFile(filepath.Join("prometheus", "alerts.yml"))), 0o644)
				t.Logf("promtool lacks Kubernetes discovery; checking %s with a static target instead", args[2])
				out, err = exec.CommandContext(ctx, bin, args[0], args[1], tmp).CombinedOutput()
			}
			if err != nil {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// TestAlertMetricNames checks that every alert expression uses only the
// metric names SPEC.md defines, so a typo cannot make an alert that never
// fires, and that the rules the operator expects are there.
func TestAlertMetricNames(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}

	known := map[string]bool{}
	for _, m := range specMetrics {
		known[m] = true
	}
	for _, h := range specHistograms {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			known[h+s] = true
		}
	}
	name := regexp.MustCompile(`ringlb_[a-z_]+`)
	used := map[string]bool{}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("alert %q: empty expr", r.Alert)
			}
			for _, m := range name.FindAllString(r.Expr, -1) {
				used[m] = true
				if !known[m] {
					t.Errorf("alert %q: metric %s is not one of ringlb's metrics", r.Alert, m)
				}
			}
		}
	}
	for _, m := range []string{
		"ringlb_upstream_available",
		"ringlb_upstream_absent",
		"ringlb_overflow_total",
		"ringlb_requests_total",
		"ringlb_no_upstream_total",
		"ringlb_config_last_reload_success",
		"ringlb_ring_info",
		"ringlb_tls_cert_not_after_seconds",
		"ringlb_hold_share_errors_total",
	} {
		if !used[m] {
			t.Errorf("no alert uses %s", m)
		}
	}
	if len(alerts) < 6 {
		t.Errorf("alerts.yml has alerts %q, want at least 6", alerts)
	}
}

// dockerBuildLine returns the Dockerfile's RUN instruction that runs
// `go build`, with line continuations joined.
func dockerBuildLine(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var found []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build") {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Dockerfile: want one RUN line with go build, found %d: %q", len(found), found)
	}
	return found[0]
}

// TestDockerfile checks the Dockerfile's shape: a static, trimmed,
// version-stamped build of ./cmd/ringlb into a distroless nonroot image.
func TestDockerfile(t *testing.T) {
	run := dockerBuildLine(t)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"-trimpath",
		"-X main.version=${VERSION}",
		"./cmd/ringlb",
	} {
		if !strings.Contains(run, want) {
			t.Errorf("Dockerfile build line %q lacks %q", run, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{
		"FROM golang:1.26 AS build",
		"COPY go.mod go.sum ./",
		"RUN go mod download",
		"ARG VERSION=dev",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"COPY " + imageConfig + " /etc/ringlb/config.yaml",
		"USER nonroot:nonroot",
		"EXPOSE 8080 9901",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// Dependencies must be downloaded before the sources are copied, or
	// every source change re-downloads them.
	if strings.Index(df, "RUN go mod download") > strings.Index(df, "COPY . .") {
		t.Error("Dockerfile: `RUN go mod download` must come before `COPY . .`")
	}
	// The build context must keep what the build needs.
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(ignore), "\n") {
		l = strings.TrimSpace(l)
		if slices.Contains([]string{"go.mod", "go.sum", "examples", "examples/configs", imageConfig, "cmd", "*.go", "**/*.go"}, l) {
			t.Errorf(".dockerignore excludes %q, which the build needs", l)
		}
	}
}

// goTool returns the go command that runs this test.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go command on PATH or in GOROOT: %v", err)
	}
	return p
}

// TestDockerBuildIsStatic runs the Dockerfile's go build on this machine
// and checks the binary is static, trimmed and stamped: distroless/static
// has no libc, so a cgo binary would not start in the image.
func TestDockerBuildIsStatic(t *testing.T) {
	run := dockerBuildLine(t)
	if !strings.Contains(run, `-ldflags "-s -w -X main.version=${VERSION}"`) {
		t.Fatalf("Dockerfile build line %q: the ldflags this test replays changed; update the test", run)
	}
	goBin := goTool(t)
	out := filepath.Join(t.TempDir(), "ringlb")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	build := exec.CommandContext(ctx, goBin, "build", "-trimpath",
		"-ldflags", "-s -w -X main.version=test", "-o", out, "./cmd/ringlb")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("go build timed out: %v\n%s", ctx.Err(), msg)
		}
		// Tell a command that does not compile (its own tests report that)
		// from flags that break the build.
		plain := exec.CommandContext(ctx, goBin, "build", "-o", os.DevNull, "./cmd/ringlb")
		plain.Dir = repoRoot
		if plainMsg, plainErr := plain.CombinedOutput(); plainErr != nil {
			t.Skipf("cmd/ringlb does not build yet, even without the Dockerfile's flags: %v\n%s", plainErr, plainMsg)
		}
		t.Fatalf("the Dockerfile's go build fails where a plain build works: %v\n%s", err, msg)
	}

	ver, err := exec.CommandContext(ctx, goBin, "version", "-m", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, ver)
	}
	// With -trimpath, go records no -ldflags in the binary (they may hold
	// paths); the version stamp is checked by running the binary below.
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true"} {
		if !bytes.Contains(ver, []byte(want)) {
			t.Errorf("go version -m %s lacks %q:\n%s", out, want, ver)
		}
	}

	if file, err := exec.LookPath("file"); err == nil {
		desc, err := exec.CommandContext(ctx, file, out).CombinedOutput()
		if err != nil {
			t.Fatalf("file: %v\n%s", err, desc)
		}
		if !bytes.Contains(desc, []byte("statically linked")) {
			t.Errorf("file %s: not statically linked:\n%s", out, desc)
		}
	} else {
		t.Logf("file not on PATH: static linking checked through go version -m only")
	}

	v, err := exec.CommandContext(ctx, out, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", out, err, v)
	}
	if !strings.HasPrefix(string(v), "ringlb test") {
		t.Errorf("%s version = %q, want it to start with \"ringlb test\"", out, v)
	}
}

// TestNoSpecReferences: the README and docs/ are the user's reference.
// Neither they nor the files users copy (config.yaml, the examples, the
// Dockerfile, the release config) may send them to a contract document
// that is not in their hands.
func TestNoSpecReferences(t *testing.T) {
	files := []string{filepath.Join(repoRoot, "config.yaml"), filepath.Join(repoRoot, "Dockerfile"), filepath.Join(repoRoot, ".goreleaser.yaml")}
	files = append(files, markdownFiles(t)...)
	filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	bad := regexp.MustCompile(`SPEC\.md|\bSPEC\b|(?i:spec document|\bthe spec\b|spec's)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if bad.MatchString(line) {
				t.Errorf("%s:%d mentions a spec document: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestVersionFromVCS: an unstamped build from a git checkout says which
// revision it was built from, as the go command recorded it.
func TestVersionFromVCS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ringlb")
	}
	goBin := goTool(t)
	out := filepath.Join(t.TempDir(), "ringlb")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goBin, "build", "-buildvcs=true", "-o", out, "./cmd/ringlb")
	build.Dir = repoRoot
	if msg, err := build.CombinedOutput(); err != nil {
		t.Skipf("go build -buildvcs=true: %v (no git checkout here?)\n%s", err, msg)
	}
	info, err := exec.CommandContext(ctx, goBin, "version", "-m", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\bvcs\.revision=([0-9a-f]{40})`).FindSubmatch(info)
	if m == nil {
		t.Skipf("the go command recorded no VCS revision (not a git checkout, or a git worktree it does not recognise):\n%s", info)
	}
	v, err := exec.CommandContext(ctx, out, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(v), "revision "+string(m[1][:12])) || strings.HasPrefix(string(v), "ringlb dev (no VCS") {
		t.Errorf("ringlb version = %q, want the revision %s", v, m[1][:12])
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestKubernetesScrapeConfigMatchesManifest: the pod-discovery scrape
// config keeps exactly the pods and port the Kubernetes manifest declares.
func TestKubernetesScrapeConfigMatchesManifest(t *testing.T) {
	var prom struct {
		ScrapeConfigs []struct {
			SD []struct {
				Role string `yaml:"role"`
			} `yaml:"kubernetes_sd_configs"`
			Relabel []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(must(os.ReadFile(filepath.Join("prometheus", "kubernetes.yml"))), &prom); err != nil {
		t.Fatal(err)
	}
	if len(prom.ScrapeConfigs) != 1 || len(prom.ScrapeConfigs[0].SD) != 1 || prom.ScrapeConfigs[0].SD[0].Role != "pod" {
		t.Fatalf("want one scrape config with pod discovery: %+v", prom)
	}
	keep := map[string]string{}
	for _, r := range prom.ScrapeConfigs[0].Relabel {
		if r.Action == "keep" && len(r.SourceLabels) == 1 {
			keep[r.SourceLabels[0]] = r.Regex
		}
	}
	manifest := string(must(os.ReadFile(filepath.Join("kubernetes", "ringlb.yaml"))))
	if v := keep["__meta_kubernetes_pod_label_app_kubernetes_io_name"]; v == "" || !strings.Contains(manifest, "app.kubernetes.io/name: "+v) {
		t.Errorf("keeps pods labelled app.kubernetes.io/name=%q; the manifest's pods are not", v)
	}
	if v := keep["__meta_kubernetes_pod_container_port_name"]; v == "" || !regexp.MustCompile(`- name: `+regexp.QuoteMeta(v)+`\n\s+containerPort: 9901`).MatchString(manifest) {
		t.Errorf("keeps the container port named %q; the manifest's admin port (9901) is not", v)
	}
}
