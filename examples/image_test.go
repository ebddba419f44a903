//go:build unix

package examples

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// The container image and the Kubernetes manifests are checked by running
// what they would run: the Dockerfile's ENTRYPOINT and CMD composed with
// each manifest container's command and args, as Kubernetes composes them,
// against a freshly built binary, with the config files the image and the
// manifests would put in place.

// dockerExecForm returns the JSON (exec form) argument list of the
// Dockerfile's last instruction named instr, or nil if there is none.
func dockerExecForm(t *testing.T, df, instr string) []string {
	t.Helper()
	var last string
	for _, line := range strings.Split(df, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), instr+" "); ok {
			last = rest
		}
	}
	if last == "" {
		return nil
	}
	var args []string
	if err := json.Unmarshal([]byte(last), &args); err != nil {
		t.Fatalf("Dockerfile %s %s: not the exec (JSON) form: %v", instr, last, err)
	}
	return args
}

// container is one container of a manifest's pod template.
type container struct {
	where         string // "examples/kubernetes/ringlb.yaml: Deployment ringlb: container ringlb"
	command, args []string
	hasCommand    bool
	hasArgs       bool
	image         string
	// mounts maps a mount path to the ConfigMap whose keys are files there.
	mounts map[string]string
	// configMaps holds the data of the ConfigMaps of the container's own
	// manifest, by name: manifests that are alternatives to each other may
	// use the same names.
	configMaps map[string]map[string]string
}

// manifestContainers returns every container of every pod template in the
// multi-document manifests, each with its manifest's ConfigMaps.
func manifestContainers(t *testing.T, files []string) []container {
	t.Helper()
	var out []container
	for _, f := range files {
		configMaps := map[string]map[string]string{}
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var doc struct {
				Kind     string `yaml:"kind"`
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
				Data map[string]string `yaml:"data"`
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Name         string    `yaml:"name"`
								Image        string    `yaml:"image"`
								Command      *[]string `yaml:"command"`
								Args         *[]string `yaml:"args"`
								VolumeMounts []struct {
									Name      string `yaml:"name"`
									MountPath string `yaml:"mountPath"`
								} `yaml:"volumeMounts"`
							} `yaml:"containers"`
							Volumes []struct {
								Name      string `yaml:"name"`
								ConfigMap *struct {
									Name string `yaml:"name"`
								} `yaml:"configMap"`
							} `yaml:"volumes"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc.Kind == "ConfigMap" {
				configMaps[doc.Metadata.Name] = doc.Data
			}
			ps := doc.Spec.Template.Spec
			vols := map[string]string{}
			for _, v := range ps.Volumes {
				if v.ConfigMap != nil {
					vols[v.Name] = v.ConfigMap.Name
				}
			}
			for _, c := range ps.Containers {
				k := container{where: fmt.Sprintf("%s: %s %s: container %s", f, doc.Kind, doc.Metadata.Name, c.Name),
					image: c.Image, mounts: map[string]string{}, configMaps: configMaps}
				if c.Command != nil {
					k.command, k.hasCommand = *c.Command, true
				}
				if c.Args != nil {
					k.args, k.hasArgs = *c.Args, true
				}
				for _, m := range c.VolumeMounts {
					if cm, ok := vols[m.Name]; ok {
						k.mounts[m.MountPath] = cm
					}
				}
				out = append(out, k)
			}
		}
		r.Close()
	}
	return out
}

// isRinglbImage reports whether a container image reference names the
// image built from the repository's Dockerfile: ringlb, with any registry
// path, tag or digest.
func isRinglbImage(ref string) bool {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	ref = ref[strings.LastIndexByte(ref, '/')+1:]
	if i := strings.IndexByte(ref, ':'); i >= 0 {
		ref = ref[:i]
	}
	return ref == "ringlb"
}

// composeArgv is what a container runs, as Kubernetes decides it: its
// command replaces the image's ENTRYPOINT (and then the image's CMD is
// ignored), its args replace the image's CMD.
func composeArgv(entrypoint, cmd []string, c container) []string {
	switch {
	case c.hasCommand && c.hasArgs:
		return append(append([]string{}, c.command...), c.args...)
	case c.hasCommand:
		return append([]string{}, c.command...)
	case c.hasArgs:
		return append(append([]string{}, entrypoint...), c.args...)
	}
	return append(append([]string{}, entrypoint...), cmd...)
}

// imageConfig is the config file the Dockerfile bakes into the image at
// /etc/ringlb/config.yaml, relative to the repository's root.
const imageConfig = "examples/configs/container.yaml"

// TestImageConfigListensOnAllInterfaces: `docker run -p 8080:8080 IMAGE`
// reaches the proxy only if the baked-in config listens on every
// interface (127.0.0.1 is the container's own loopback); the admin
// listener, which can reload the config, stays on loopback.
func TestImageConfigListensOnAllInterfaces(t *testing.T) {
	cfg, err := config.Load(filepath.Join(repoRoot, imageConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:8080" {
		t.Errorf("%s: listen = %q, want 0.0.0.0:8080", imageConfig, cfg.Listen)
	}
	host, _, err := net.SplitHostPort(cfg.AdminListen)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		t.Errorf("%s: admin_listen = %q, want a loopback address", imageConfig, cfg.AdminListen)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "0.0.0.0:8080") || !strings.Contains(string(doc), imageConfig) {
		t.Errorf("docs/operations.md does not say that the image's config (%s) listens on 0.0.0.0:8080", imageConfig)
	}
}

var listenLine = regexp.MustCompile(`(?m)^(listen|admin_listen):[ \t]*\S+`)

// TestImageAndManifestsStart runs the image's default command and every
// Kubernetes container's composed command line against the real binary:
// each must start serving (on free loopback ports instead of the
// configured ones) and exit 0 on SIGTERM.
func TestImageAndManifestsStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ringlb and runs it")
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	entrypoint := dockerExecForm(t, df, "ENTRYPOINT")
	cmd := dockerExecForm(t, df, "CMD")
	if len(entrypoint) == 0 || entrypoint[0] != "/ringlb" {
		t.Fatalf("Dockerfile ENTRYPOINT %q, want it to start with /ringlb", entrypoint)
	}
	if !strings.Contains(df, "COPY --from=build /out/ringlb /ringlb") || !strings.Contains(df, "COPY "+imageConfig+" /etc/ringlb/config.yaml") {
		t.Fatal("Dockerfile: the binary or the baked-in config moved; update this test's file layout")
	}
	bin := ringlbBinary(t)
	defaultConfig, err := os.ReadFile(filepath.Join(repoRoot, imageConfig))
	if err != nil {
		t.Fatal(err)
	}

	manifests, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no Kubernetes manifests: %v", err)
	}
	var containers []container
	for _, c := range manifestContainers(t, manifests) {
		// Only ringlb's containers run this image; the others are the
		// app ringlb fronts (examples/kubernetes/discovery.yaml).
		if isRinglbImage(c.image) {
			containers = append(containers, c)
		}
	}
	for _, m := range manifests {
		if !slices.ContainsFunc(containers, func(c container) bool { return strings.HasPrefix(c.where, m+":") }) {
			t.Errorf("%s: no container runs the ringlb image", m)
		}
	}
	// docker run IMAGE, with no arguments: the baked-in config.
	cases := append([]container{{where: "Dockerfile (docker run with no arguments)", mounts: map[string]string{}}}, containers...)
	for _, c := range cases {
		t.Run(c.where, func(t *testing.T) {
			argv := composeArgv(entrypoint, cmd, c)
			// The image's file system: /ringlb, /etc/ringlb/config.yaml,
			// then the container's ConfigMap mounts over it.
			root := t.TempDir()
			files := map[string][]byte{"/etc/ringlb/config.yaml": defaultConfig}
			for dir, cm := range c.mounts {
				data, ok := c.configMaps[cm]
				if !ok {
					t.Fatalf("mount %s: no ConfigMap %q in the container's manifest", dir, cm)
				}
				for p := range files {
					if strings.HasPrefix(p, dir+"/") {
						delete(files, p) // a directory mount hides what was there
					}
				}
				for name, v := range data {
					files[dir+"/"+name] = []byte(v)
				}
			}
			for p, v := range files {
				// Free loopback ports instead of the configured ones.
				v = listenLine.ReplaceAll(v, []byte("$1: 127.0.0.1:0"))
				dst := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, v, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if argv[0] != "/ringlb" {
				t.Fatalf("%s runs %q: the image holds /ringlb", c.where, argv)
			}
			run := []string{bin}
			for _, a := range argv[1:] {
				if strings.HasPrefix(a, "/") {
					a = filepath.Join(root, a)
				}
				run = append(run, a)
			}
			p := exec.Command(run[0], run[1:]...)
			logs := watchLines(regexp.MustCompile(`msg="ringlb serving".* admin_listen=(\S+)`))
			p.Stdout, p.Stderr = logs, logs
			proc := startGroup(t, p)
			select {
			case <-proc.done:
				t.Fatalf("%s runs %q, which exited: %v\n%s", c.where, argv, proc.err, logs)
			case <-logs.found:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s runs %q, which did not start serving within 20s:\n%s", c.where, argv, logs)
			}
			p.Process.Signal(syscall.SIGTERM)
			select {
			case <-proc.done:
				if proc.err != nil {
					t.Errorf("%s: %q after SIGTERM: %v, want exit 0\n%s", c.where, argv, proc.err, logs)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s: %q did not exit within 30s of SIGTERM", c.where, argv)
			}
		})
	}
}
