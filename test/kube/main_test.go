// Package kube runs ringlb's Kubernetes discovery against the real thing:
// a kube-apiserver with etcd and the EndpointSlice controller, in-process,
// from the Kubernetes Go modules. It is a module of its own because
// Kubernetes is not meant to be imported as a library; ringlb's own module
// depends on client-go only.
//
// EndpointSlice validation rejects loopback addresses, so the tests run in
// a private network namespace of their own (unshare -n, which needs root):
// the test binary re-executes itself there, gives its loopback TEST-NET-1
// addresses (192.0.2.0/24), and runs the upstreams, ringlb and the control
// plane on them. No packet leaves that namespace.
package kube

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

const netnsEnv = "RINGLB_KUBE_NETNS"

// addrs are the TEST-NET-1 addresses the namespace's loopback gets: the
// pods' addresses.
var addrs = []string{"192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.14", "192.0.2.22", "192.0.2.30"}

func TestMain(m *testing.M) {
	if os.Getenv(netnsEnv) == "" {
		os.Exit(reexec())
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "ip %v: %v: %s\n", args, err, out)
			os.Exit(1)
		}
	}
	for _, a := range addrs {
		if out, err := exec.Command("ip", "addr", "add", a+"/32", "dev", "lo").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "ip addr add %s: %v: %s\n", a, err, out)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// reexec runs this test binary again in a new network namespace and
// returns its exit code. Without root or unshare the tests cannot run:
// they are skipped, except in CI (CI=true), where that is a failure.
func reexec() int {
	_, err := exec.LookPath("unshare")
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("not root")
	}
	if err == nil {
		if _, err = exec.LookPath("ip"); err != nil {
			err = fmt.Errorf("no ip command (iproute2): %w", err)
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "test/kube needs a private network namespace (unshare -n as root): %v\n", err)
			return 1
		}
		fmt.Printf("test/kube: skipped: needs a private network namespace (unshare -n as root): %v\nok\n", err)
		return 0
	}
	cmd := exec.Command("unshare", append([]string{"-n", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "unshare: %v\n", err)
		return 1
	}
	return 0
}
