package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Kubernetes sources: the EndpointSlices (discovery.k8s.io/v1) of one
// Service, those labelled kubernetes.io/service-name=SERVICE in its
// namespace, watched through a client-go informer (list, then watch; it
// lists again after a broken watch, with backoff). The Discoverer reads the
// informer's cache on every change it reports and every interval, and
// applies it as an answer; without Run (ringlb simulate) Poll lists the
// slices once instead.
//
// Identity, per endpoint (the port is the slice port's number):
//
//	hostname set (StatefulSet pods)  HOSTNAME.SERVICE.NAMESPACE.svc.CLUSTER_DOMAIN:PORT
//	                                 (the name SRV discovery gives the same pod)
//	targetRef a Pod                  POD.NAMESPACE:PORT
//	otherwise                        ADDRESS:PORT ([v6]:port)
//
// Conditions: serving (nil: true) and not terminating is an ordinary
// member; serving and terminating is a member with Terminating set; not
// serving is left out of the answer (so absent). An endpoint in several
// slices (a dual-stack Service, or one the controller is moving) is one
// member: its best condition counts, then its lowest IPv4 address, else
// lowest IPv6.

// KubeService is a Kubernetes source, a source's kubernetes block: the
// EndpointSlices of one Service port.
type KubeService struct {
	// Service is service, the Service's name; required.
	Service string `yaml:"service"`
	// Namespace is namespace, the Service's namespace; "" is the
	// namespace ringlb's pod runs in (read from its service account),
	// else "default" (see DefaultNamespace).
	Namespace string `yaml:"namespace"`
	// Port is port, the EndpointSlice port (TCP), by name or by number;
	// required.
	Port string `yaml:"port"`
}

// String returns "kubernetes:NAMESPACE/SERVICE:PORT".
func (k KubeService) String() string {
	return "kubernetes:" + k.Namespace + "/" + k.Service + ":" + k.Port
}

// selector is the label selector of the Service's EndpointSlices.
func (k KubeService) selector() string { return serviceNameLabel + "=" + k.Service }

// DefaultClusterDomain is the cluster DNS domain when none is configured.
const DefaultClusterDomain = "cluster.local"

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// DefaultNamespace is the namespace of a Kubernetes source that names
// none: with no kubeconfig, the namespace of the pod ringlb runs in, read
// from its service account; otherwise (or outside a pod) "default".
func DefaultNamespace(kubeconfig string) string {
	if kubeconfig == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			if ns := strings.TrimSpace(string(b)); ns != "" {
				return ns
			}
		}
	}
	return "default"
}

// withNamespaces returns srcs (a copy when it changes) with the default
// namespace filled in where a Kubernetes source names none.
func withNamespaces(srcs []Source, kubeconfig string) []Source {
	ns := ""
	for i := range srcs {
		if srcs[i].Kubernetes.Service == "" || srcs[i].Kubernetes.Namespace != "" {
			continue
		}
		if ns == "" {
			ns = DefaultNamespace(kubeconfig)
			srcs = slices.Clone(srcs)
		}
		srcs[i].Kubernetes.Namespace = ns
	}
	return srcs
}

// KubeRESTConfig returns the client configuration for kubeconfig ("": the
// pod's service account). It reads files and the environment but asks
// the API server nothing.
func KubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: no kubeconfig set and not in a pod: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// kubeClient is one API server's client, for every Kubernetes source of a
// Discoverer. It is a REST client for discovery.k8s.io/v1 alone: the
// typed clientset would bring every API group's types into the binary
// (25 MB) for the one resource read here.
type kubeClient struct {
	kubeconfig string
	rc         *rest.RESTClient
	params     runtime.ParameterCodec
	err        error // the client could not be made: every source fails with it
}

func newKubeClient(kubeconfig string, timeout time.Duration) *kubeClient {
	kc := &kubeClient{kubeconfig: kubeconfig}
	cfg, err := KubeRESTConfig(kubeconfig)
	if err != nil {
		kc.err = err
		return kc
	}
	scheme := runtime.NewScheme()
	if err := addSliceTypes(scheme); err != nil {
		kc.err = err
		return kc
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "ringlb"
	cfg.APIPath = "/apis"
	gv := sliceGroupVersion
	cfg.GroupVersion = &gv
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	// A dead API server is found out within the query timeout; a watch
	// has no overall timeout (the server ends it).
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	kc.rc, kc.err = rest.RESTClientFor(cfg)
	kc.params = runtime.NewParameterCodec(scheme)
	return kc
}

// listPage lists one page of k's slices.
func (kc *kubeClient) listPage(ctx context.Context, k KubeService, o metav1.ListOptions) (*endpointSliceList, error) {
	o.LabelSelector = k.selector()
	l := &endpointSliceList{}
	err := kc.request(k, &o).Do(ctx).Into(l)
	return l, err
}

// watch watches k's slices.
func (kc *kubeClient) watch(ctx context.Context, k KubeService, o metav1.ListOptions) (watch.Interface, error) {
	o.LabelSelector = k.selector()
	o.Watch = true
	return kc.request(k, &o).Watch(ctx)
}

// request is a GET of k's slices. The REST client's own retries are off:
// the informer retries with its backoff, and each failure is counted.
func (kc *kubeClient) request(k KubeService, o *metav1.ListOptions) *rest.Request {
	return kc.rc.Get().Namespace(k.Namespace).Resource("endpointslices").VersionedParams(o, kc.params).MaxRetries(0)
}

// list lists the source's slices once, following continuations.
func (kc *kubeClient) list(ctx context.Context, k KubeService, timeout time.Duration) ([]*endpointSlice, error) {
	if kc.err != nil {
		return nil, kc.err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []*endpointSlice
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := kc.listPage(ctx, k, opts)
		if err != nil {
			return nil, fmt.Errorf("list endpointslices of %s/%s: %w", k.Namespace, k.Service, err)
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// kubeWatch is one Kubernetes source's informer while the Discoverer runs.
type kubeWatch struct {
	k      KubeService
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc

	mu      sync.Mutex
	errs    int   // list and watch failures not yet applied
	lastErr error // the latest of them
	failing bool  // the last list or watch request failed
}

// startWatch starts an informer on k's slices; kick is called after every
// change it sees, every failure and its first sync.
func (kc *kubeClient) startWatch(ctx context.Context, k KubeService, kick func()) *kubeWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &kubeWatch{k: k, cancel: cancel}
	if kc.err != nil {
		w.errs, w.lastErr, w.failing = 1, kc.err, true
		return w
	}
	// Every list and watch request goes through here: a failed one is
	// counted (the informer retries it with backoff; a refused watch it
	// retries without telling anyone), a successful one ends the failure.
	note := func(err error) {
		err = requestError(err)
		w.mu.Lock()
		if err != nil {
			w.errs++
			w.lastErr = err
		}
		changed := w.failing != (err != nil)
		w.failing = err != nil
		w.mu.Unlock()
		if err != nil || changed {
			kick()
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := kc.listPage(ctx, k, o)
			if ctx.Err() == nil {
				note(err)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := kc.watch(ctx, k, o)
			if ctx.Err() == nil && !apierrors.IsBadRequest(err) { // a streaming list refused: the informer lists
				note(err)
			}
			return wi, err
		},
	}
	// No resync: the Discoverer reads the cache every interval anyway.
	w.inf = cache.NewSharedIndexInformer(lw, &endpointSlice{}, 0, cache.Indexers{})
	// The failures are counted above; the informer's own report of them
	// would be a second log line in another format.
	w.inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	})
	go w.inf.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
			kick() // a Service without slices sends no event
		}
	}()
	return w
}

// requestError drops the query from a failed request's URL: the
// informer's requests differ in it (a random timeoutSeconds, the resource
// version), and an outage should read, and be logged, as one error.
func requestError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	u := ue.URL
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	return fmt.Errorf("%s %s: %w", ue.Op, u, ue.Err)
}

// kubeResult is what a Kubernetes source says at one poll.
type kubeResult struct {
	recs []record
	errs int   // failures to apply (each counted)
	err  error // the latest
	ok   bool  // recs is an answer; false: keep the last one
}

// read returns the watch's current answer: its failures since the last
// read, and the cache's contents once it has synced, unless it is failing
// (then the last answer stands).
func (w *kubeWatch) read(domain string) kubeResult {
	w.mu.Lock()
	r := kubeResult{errs: w.errs, err: w.lastErr}
	w.errs = 0
	if w.inf == nil {
		w.mu.Unlock()
		return r
	}
	failing := w.failing
	w.mu.Unlock()
	if failing || !w.inf.HasSynced() {
		return r
	}
	objs := w.inf.GetStore().List()
	sl := make([]*endpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*endpointSlice); ok {
			sl = append(sl, s)
		}
	}
	r.recs, r.ok = sliceRecords(sl, w.k, domain), true
	return r
}
