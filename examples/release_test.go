package examples

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// goreleaserVersion is the GoReleaser the release test runs, pinned:
// bench/release.sh installs exactly it, and the docs name it.
const goreleaserVersion = "v2.15.1"

// goreleaserPath is the pinned goreleaser that bench/release.sh installs
// and names in $RINGLB_GORELEASER. The release test is a step of its own,
// not of the test suite: building goreleaser takes many minutes and the
// snapshot cross-builds ringlb four times, so without RINGLB_GORELEASER
// it is skipped (run bash bench/release.sh).
func goreleaserPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("RINGLB_GORELEASER")
	if p == "" {
		t.Skip("the release snapshot runs from bash bench/release.sh (RINGLB_GORELEASER unset)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("RINGLB_GORELEASER=%s: %v", p, err)
	}
	return p
}

// TestReleaseStepInstallsPinnedGoreleaser: bench/release.sh, the docs and
// .goreleaser.yaml name one goreleaser version.
func TestReleaseStepInstallsPinnedGoreleaser(t *testing.T) {
	for _, f := range []string{filepath.Join("bench", "release.sh"), filepath.Join("docs", "operations.md"), ".goreleaser.yaml"} {
		data := string(must(os.ReadFile(filepath.Join(repoRoot, f))))
		if !strings.Contains(data, "github.com/goreleaser/goreleaser/v2@"+goreleaserVersion) {
			t.Errorf("%s does not install goreleaser %s", f, goreleaserVersion)
		}
	}
}

// TestReleaseSnapshot runs .goreleaser.yaml in snapshot mode (nothing is
// published) and checks what a release would ship: one tar.gz per
// target, linux and darwin on amd64 and arm64, each holding a binary of
// that target, the README, the docs and config.yaml; checksums.txt with
// the SHA-256 of each; and a binary that prints the release's version.
func TestReleaseSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-builds ringlb four times")
	}
	bin := goreleaserPath(t)
	if _, err := exec.LookPath("git"); err != nil {
		testenv.SkipExternal(t, "git", "not on PATH (goreleaser reads the repository's state)")
	}
	dist := filepath.Join(t.TempDir(), "dist")
	cfg := filepath.Join(t.TempDir(), "goreleaser.yaml")
	src := string(must(os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))))
	if strings.Contains(src, "\ndist:") {
		t.Fatal(".goreleaser.yaml sets dist: the test puts its own")
	}
	if err := os.WriteFile(cfg, []byte(src+"\ndist: "+dist+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "release", "--snapshot", "--clean", "--config", cfg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(goTool(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goreleaser release --snapshot: %v\n%s", err, out)
	}
	t.Logf("goreleaser release --snapshot took %v", time.Since(start).Round(time.Second))

	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(dist, "metadata.json"))), &meta); err != nil || meta.Version == "" {
		t.Fatalf("dist/metadata.json: %v (%+v)", err, meta)
	}
	sums := map[string]string{}
	f := must(os.Open(filepath.Join(dist, "checksums.txt")))
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("checksums.txt: line %q", sc.Text())
		}
		sums[name] = sum
	}
	var names []string
	for _, goos := range []string{"darwin", "linux"} {
		for _, goarch := range []string{"amd64", "arm64"} {
			name := fmt.Sprintf("ringlb_%s_%s_%s.tar.gz", meta.Version, goos, goarch)
			names = append(names, name)
			t.Run(goos+"_"+goarch, func(t *testing.T) {
				path := filepath.Join(dist, name)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(data)
				if got := hex.EncodeToString(sum[:]); sums[name] != got {
					t.Errorf("checksums.txt says %q for %s; its SHA-256 is %s", sums[name], name, got)
				}
				dir := t.TempDir()
				files := untar(t, path, dir)
				for _, want := range []string{"ringlb", "README.md", "config.yaml", "docs/configuration.md", "docs/changelog.md"} {
					if !slices.Contains(files, want) {
						t.Errorf("%s lacks %s: %q", name, want, files)
					}
				}
				exe := filepath.Join(dir, "ringlb")
				if got := binaryTarget(t, exe); got != goos+"/"+goarch {
					t.Errorf("%s: its ringlb is a %s binary", name, got)
				}
				if goos != runtime.GOOS || goarch != runtime.GOARCH {
					return
				}
				out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
				if want := "ringlb " + meta.Version + " ("; err != nil || !strings.HasPrefix(string(out), want) {
					t.Errorf("%s version: %q (%v), want it to start with %q", name, out, err, want)
				}
			})
		}
	}
	for name := range sums {
		if !slices.Contains(names, name) {
			t.Errorf("checksums.txt lists %s, not one of the archives", name)
		}
	}
	t.Logf("release files: checksums.txt, %s", strings.Join(names, ", "))
}

// binaryTarget reads an executable's GOOS/GOARCH from its header: ELF for
// linux, Mach-O for darwin.
func binaryTarget(t *testing.T, path string) string {
	t.Helper()
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		switch f.Machine {
		case elf.EM_X86_64:
			return "linux/amd64"
		case elf.EM_AARCH64:
			return "linux/arm64"
		}
		return "linux/" + f.Machine.String()
	}
	f, err := macho.Open(path)
	if err != nil {
		t.Fatalf("%s: neither ELF nor Mach-O: %v", path, err)
	}
	defer f.Close()
	switch f.Cpu {
	case macho.CpuAmd64:
		return "darwin/amd64"
	case macho.CpuArm64:
		return "darwin/arm64"
	}
	return "darwin/" + f.Cpu.String()
}

// untar extracts a tar.gz into dir and returns the names it holds.
func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	f := must(os.Open(archive))
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode)&0o755|0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
}
