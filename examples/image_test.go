//go:build unix

package examples

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
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
	// mounts maps a mount path to the ConfigMap whose keys are files there.
	mounts map[string]string
}

// manifestContainers returns every container of every pod template (and
// every ConfigMap's data) in the multi-document manifests.
func manifestContainers(t *testing.T, files []string) ([]container, map[string]map[string]string) {
	t.Helper()
	var out []container
	configMaps := map[string]map[string]string{}
	for _, f := range files {
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
				k := container{where: fmt.Sprintf("%s: %s %s: container %s", f, doc.Kind, doc.Metadata.Name, c.Name), mounts: map[string]string{}}
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
	return out, configMaps
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
	if !strings.Contains(df, "COPY --from=build /out/ringlb /ringlb") || !strings.Contains(df, "COPY config.yaml /etc/ringlb/config.yaml") {
		t.Fatal("Dockerfile: the binary or the default config moved; update this test's file layout")
	}
	bin := ringlbBinary(t)
	defaultConfig, err := os.ReadFile(filepath.Join(repoRoot, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	manifests, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no Kubernetes manifests: %v", err)
	}
	containers, configMaps := manifestContainers(t, manifests)
	if len(containers) == 0 {
		t.Fatal("the Kubernetes manifests have no containers")
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
				data, ok := configMaps[cm]
				if !ok {
					t.Fatalf("mount %s: no ConfigMap %q in the manifests", dir, cm)
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
