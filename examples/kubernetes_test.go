package examples

import (
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// manifestObject is what these checks read of a Kubernetes object.
type manifestObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Image string `yaml:"image"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// manifestObjects decodes every object of examples/kubernetes/NAME.
func manifestObjects(t *testing.T, name string) []manifestObject {
	t.Helper()
	f, err := os.Open(filepath.Join("kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []manifestObject
	dec := yaml.NewDecoder(f)
	for {
		var o manifestObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
}

// TestKubernetesManifestsPortable: no object of the manifests names a
// namespace, and no kubernetes discovery source either, so that `kubectl
// apply -n NS -f FILE` puts everything in NS and ringlb watches its own.
func TestKubernetesManifestsPortable(t *testing.T) {
	for _, m := range kubernetesManifests {
		t.Run(m, func(t *testing.T) {
			for _, o := range manifestObjects(t, m) {
				if o.Metadata.Namespace != "" {
					t.Errorf("%s %s names namespace %q: kubectl apply -n would conflict with it", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
				}
			}
			cfg := kubernetesConfig(t, m)
			if cfg.Discovery == nil {
				return
			}
			for i, s := range cfg.Discovery.Sources {
				if s.Kubernetes.Namespace != "" {
					t.Errorf("discovery.sources[%d].kubernetes.namespace = %q: write \"\" (the pod's own namespace)", i, s.Kubernetes.Namespace)
				}
			}
		})
	}
}

// TestKubernetesReplicasShareHold: a manifest that runs several ringlb
// replicas with hold on has them share it (hold.cookie or hold.share): a
// replica that never served a session would send it elsewhere. With
// hold.share, the manifest ships the Service its URL names. The
// EndpointSlices manifest, whose promise is that a terminating pod's
// sessions stay, has hold on.
func TestKubernetesReplicasShareHold(t *testing.T) {
	for _, m := range kubernetesManifests {
		t.Run(m, func(t *testing.T) {
			cfg := kubernetesConfig(t, m)
			objs := manifestObjects(t, m)
			replicas := 0
			services := map[string]bool{}
			for _, o := range objs {
				if o.Kind == "Service" {
					services[o.Metadata.Name] = true
				}
				for _, c := range o.Spec.Template.Spec.Containers {
					if isRinglbImage(c.Image) && o.Spec.Replicas != nil {
						replicas += *o.Spec.Replicas
					}
				}
			}
			if m == "endpointslices.yaml" && !cfg.Hold.On() {
				t.Error("hold is off: a terminating pod's sessions would move at once")
			}
			if !cfg.Hold.On() || replicas < 2 {
				return
			}
			h := cfg.Hold
			if h.Cookie.Name == "" && h.Share.Redis == "" {
				t.Fatalf("%d ringlb replicas with per-process hold: set hold.cookie or hold.share", replicas)
			}
			if h.Share.Redis != "" {
				u, err := url.Parse(h.Share.Redis)
				if err != nil {
					t.Fatal(err)
				}
				host := strings.Split(u.Hostname(), ".")[0]
				if !services[host] {
					t.Errorf("hold.share.redis %s names Service %q, which the manifest does not ship", h.Share.Redis, host)
				}
			}
		})
	}
}

// TestKubernetesManifestsNotes: the manifests say what their Kubernetes
// needs and no longer send people to POST /reload on every replica (ringlb
// watches its config file).
func TestKubernetesManifestsNotes(t *testing.T) {
	for _, m := range kubernetesManifests {
		data := string(must(os.ReadFile(filepath.Join("kubernetes", m))))
		if strings.Contains(data, "POST /reload") {
			t.Errorf("%s advises POST /reload: the config file is watched", m)
		}
		if strings.Contains(data, "preStop:") && strings.Contains(data, "sleep:") &&
			(!strings.Contains(data, "1.30") || !strings.Contains(data, `exec: {command: ["sleep"`)) {
			t.Errorf("%s uses preStop's sleep action without saying it needs Kubernetes 1.30 and giving the exec hook for older clusters", m)
		}
	}
}

// TestKubernetesScrapeSnippet: docs/kubernetes.md's scrape snippet is
// examples/prometheus/kubernetes.yml's relabelling, the namespace label the
// alerts group fleets by included, and the file warns that Debian's
// promtool cannot read Kubernetes discovery.
func TestKubernetesScrapeSnippet(t *testing.T) {
	type relabel struct {
		SourceLabels []string `yaml:"source_labels"`
		Regex        string   `yaml:"regex"`
		Action       string   `yaml:"action"`
		TargetLabel  string   `yaml:"target_label"`
	}
	type prom struct {
		ScrapeConfigs []struct {
			Relabel []relabel `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	doc := string(must(os.ReadFile(filepath.Join(repoRoot, "docs", "kubernetes.md"))))
	m := regexp.MustCompile("(?s)pod discovery:\n\n```yaml\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/kubernetes.md: no scrape snippet after \"pod discovery:\"")
	}
	var snippet, file prom
	if err := yaml.Unmarshal([]byte(m[1]), &snippet); err != nil || len(snippet.ScrapeConfigs) != 1 {
		t.Fatalf("the snippet: %v (%d scrape configs)", err, len(snippet.ScrapeConfigs))
	}
	data := must(os.ReadFile(filepath.Join("prometheus", "kubernetes.yml")))
	if err := yaml.Unmarshal(data, &file); err != nil || len(file.ScrapeConfigs) != 1 {
		t.Fatalf("kubernetes.yml: %v", err)
	}
	labels := map[string]bool{}
	for _, r := range snippet.ScrapeConfigs[0].Relabel {
		if !slices.ContainsFunc(file.ScrapeConfigs[0].Relabel, func(f relabel) bool { return reflect.DeepEqual(f, r) }) {
			t.Errorf("the snippet's relabelling %+v is not kubernetes.yml's", r)
		}
		labels[r.TargetLabel] = true
	}
	if !labels["namespace"] {
		t.Error("the snippet sets no namespace label: RinglbReplicasDisagree groups fleets by job and namespace")
	}
	if !strings.Contains(string(data), "Debian's promtool") {
		t.Error("kubernetes.yml does not say that Debian's promtool is built without Kubernetes discovery")
	}
}
