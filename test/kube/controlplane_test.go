package kube

import (
	"context"
	"path"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	etcdtesting "k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
)

// controlPlane is etcd, a kube-apiserver and the EndpointSlice
// controller, all in this process.
type controlPlane struct {
	client     kubernetes.Interface
	config     *rest.Config
	kubeconfig string // a kubeconfig file naming the API server
	stop       func() // stops the API server (etcd and the controller stay)
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	start := time.Now()
	etcd := etcdtesting.NewTestConfig(t)
	etcdtesting.RunEtcd(t, etcd)
	storage := storagebackend.NewDefaultConfig(path.Join("ringlb", "registry"), nil)
	storage.Transport.ServerList = []string{etcd.ListenClientUrls[0].String()}

	// The request timeout is also how long a shutdown waits for open
	// connections (ringlb's watch is one): 60s by default.
	inst := kubeapiservertesting.NewDefaultTestServerOptions()
	inst.RequestTimeout = 5 * time.Second
	srv := kubeapiservertesting.StartTestServerOrDie(t, inst, []string{
		"--endpoint-reconciler-type=none",            // the kubernetes Service's 127.0.0.1 would fail validation
		"--disable-admission-plugins=ServiceAccount", // no service account controller runs
	}, storage)
	stopped := false
	cp := &controlPlane{config: srv.ClientConfig, stop: func() {
		if !stopped {
			stopped = true
			srv.TearDownFn()
		}
	}}
	t.Cleanup(cp.stop)
	cfg := rest.CopyConfig(srv.ClientConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp.client = client

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf := informers.NewSharedInformerFactory(client, 0)
	ctrl := endpointslice.NewController(ctx, inf.Core().V1().Pods(), inf.Core().V1().Services(),
		inf.Core().V1().Nodes(), inf.Discovery().V1().EndpointSlices(), 100, client, 0)
	inf.Start(ctx.Done())
	go ctrl.Run(ctx, 2)

	// The controller needs the pods' node.
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp.kubeconfig = writeKubeconfig(t, srv.ClientConfig)
	t.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))
	return cp
}

// writeKubeconfig writes a kubeconfig file for cfg.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData,
		CertificateAuthority: cfg.CAFile, InsecureSkipTLSVerify: cfg.Insecure,
		TLSServerName: cfg.ServerName} // the loopback certificate's name, not the address
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// createService creates the headless Service prod/app selecting app=demo,
// port http 8080.
func (cp *controlPlane) createService(t *testing.T) {
	t.Helper()
	_, err := cp.client.CoreV1().Services("prod").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "demo"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createPod creates a StatefulSet-like pod prod/NAME (hostname NAME,
// subdomain app) on node-1, and marks it running and ready at ip, as a
// kubelet would.
func (cp *controlPlane) createPod(t *testing.T, name, ip string) {
	t.Helper()
	ctx := context.Background()
	p, err := cp.client.CoreV1().Pods("prod").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "demo"}},
		Spec: corev1.PodSpec{
			Hostname: name, Subdomain: "app", NodeName: "node-1",
			Containers: []corev1.Container{{Name: "app", Image: "demo", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := cp.client.CoreV1().Pods("prod").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setReady sets the pod's Ready condition.
func (cp *controlPlane) setReady(t *testing.T, name string, ready bool) {
	t.Helper()
	ctx := context.Background()
	p, err := cp.client.CoreV1().Pods("prod").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if _, err := cp.client.CoreV1().Pods("prod").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletePod deletes a pod with a grace period: with no kubelet to end it,
// a pod deleted with grace > 0 stays terminating.
func (cp *controlPlane) deletePod(t *testing.T, name string, grace int64) {
	t.Helper()
	err := cp.client.CoreV1().Pods("prod").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil {
		t.Fatal(err)
	}
}
