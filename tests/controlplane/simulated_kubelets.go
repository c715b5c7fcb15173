package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/utils/ptr"
)

const (
	leaseDurationSeconds = 40
	leaseRenewInterval   = 10 * time.Second
	simulatorWorkers     = 8
)

// realKubeletLabel marks the nodes of `controlplane kubelet`: a real kubelet keeps their
// Lease, status and pods, so the simulator leaves them alone when both share a cluster.
const realKubeletLabel = "controlplane.mcsched.test/real-kubelet"

// isRealNode tells a node that a real kubelet registered.
func isRealNode(n *corev1.Node) bool {
	_, ok := n.Labels[realKubeletLabel]
	return ok
}

// isVirtualNode tells a node that stands for a whole leaf cluster: mcsched's agent keeps
// its Lease and status, so the simulator leaves it alone.
func isVirtualNode(n *corev1.Node) bool {
	if _, ok := n.Labels["mcsched.io/cluster"]; ok {
		return true
	}
	for _, t := range n.Spec.Taints {
		if t.Key == "mcsched.io/leaf" || t.Key == "kosmos.io/node" {
			return true
		}
	}
	return false
}

// kubeletSimulator does what a kubelet would for API-only nodes: it renews their Lease,
// reports them Ready unless a test set another Ready condition, runs the pods bound to
// them (Running and Ready with a pod IP) and finalises the deletion of those pods.
type kubeletSimulator struct {
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	pods   corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex
	nextIP    uint32
	ips       map[string]string
	addresses podAddresses
	// mirrored: per node, the extended resources syncExtendedResources copied from
	// capacity into allocatable.
	mirrored map[string]map[corev1.ResourceName]bool
}

// podAddress gives the pods of namespace whose name starts with prefix a fixed IP.
type podAddress struct {
	namespace, prefix, ip string
}

// podAddresses is the repeatable --pod-address flag.
type podAddresses []podAddress

func (a *podAddresses) String() string {
	parts := make([]string, 0, len(*a))
	for _, p := range *a {
		parts = append(parts, p.namespace+"/"+p.prefix+"="+p.ip)
	}
	return strings.Join(parts, ",")
}

func (a *podAddresses) Set(v string) error {
	target, ip, ok := strings.Cut(v, "=")
	namespace, prefix, okNS := strings.Cut(target, "/")
	if !ok || !okNS || namespace == "" || prefix == "" {
		return fmt.Errorf("%q is not NAMESPACE/PREFIX=IP", v)
	}
	if net.ParseIP(ip) == nil {
		return fmt.Errorf("%q: %q is not an IP address", v, ip)
	}
	*a = append(*a, podAddress{namespace: namespace, prefix: prefix, ip: ip})
	return nil
}

func runKubeletSimulator(ctx context.Context, client kubernetes.Interface, addresses podAddresses) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	nodeInformer := factory.Core().V1().Nodes()
	podInformer := factory.Core().V1().Pods()
	s := &kubeletSimulator{
		client:    client,
		nodes:     nodeInformer.Lister(),
		pods:      podInformer.Lister(),
		queue:     workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		ips:       map[string]string{},
		addresses: addresses,
		mirrored:  map[string]map[corev1.ResourceName]bool{},
	}
	defer s.queue.ShutDown()
	enqueue := func(obj interface{}) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
				s.queue.Add(key)
			}
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	}); err != nil {
		return err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if n, ok := obj.(*corev1.Node); ok {
				s.heartbeat(ctx, n)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if n, ok := obj.(*corev1.Node); ok && !isVirtualNode(n) && !isRealNode(n) {
				if err := s.syncExtendedResources(ctx, n); err != nil {
					klog.V(2).InfoS("node allocatable update failed", "node", n.Name, "err", err)
				}
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache for %v did not sync", typ)
		}
	}
	for i := 0; i < simulatorWorkers; i++ {
		go wait.UntilWithContext(ctx, s.worker, time.Second)
	}
	wait.UntilWithContext(ctx, s.renewAll, leaseRenewInterval)
	return nil
}

func (s *kubeletSimulator) renewAll(ctx context.Context) {
	nodes, err := s.nodes.List(labelsEverything())
	if err != nil {
		return
	}
	for _, n := range nodes {
		s.heartbeat(ctx, n)
	}
}

func (s *kubeletSimulator) heartbeat(ctx context.Context, n *corev1.Node) {
	if isVirtualNode(n) || isRealNode(n) {
		return
	}
	if err := s.renewLease(ctx, n); err != nil {
		klog.V(2).InfoS("lease renewal failed", "node", n.Name, "err", err)
	}
	if err := s.reportReady(ctx, n); err != nil {
		klog.V(2).InfoS("node status update failed", "node", n.Name, "err", err)
	}
	if err := s.syncExtendedResources(ctx, n); err != nil {
		klog.V(2).InfoS("node allocatable update failed", "node", n.Name, "err", err)
	}
}

func (s *kubeletSimulator) renewLease(ctx context.Context, n *corev1.Node) error {
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: n.Name,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.Name),
				LeaseDurationSeconds: ptr.To[int32](leaseDurationSeconds),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// reportReady adds a Ready=True condition to a node that has none; a Ready condition a
// test wrote itself (say False) is kept.
func (s *kubeletSimulator) reportReady(ctx context.Context, n *corev1.Node) error {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return nil
		}
	}
	n = n.DeepCopy()
	now := metav1.Now()
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status (simulated)", LastHeartbeatTime: now, LastTransitionTime: now,
	})
	_, err := s.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// syncExtendedResources makes a node's allocatable follow its capacity for extended
// resources (example.com/foo), as a kubelet computes allocatable from capacity: a test
// that adds one to the capacity alone (Kubernetes' e2e specs do) finds it allocatable, and
// gone again once it removed it. Only the extended resources the simulator itself added
// are removed, so a node written with allocatable alone keeps it.
func (s *kubeletSimulator) syncExtendedResources(ctx context.Context, n *corev1.Node) error {
	s.mu.Lock()
	mirrored := s.mirrored[n.Name]
	s.mu.Unlock()
	var changed bool
	allocatable := n.Status.Allocatable.DeepCopy()
	if allocatable == nil {
		allocatable = corev1.ResourceList{}
	}
	added := map[corev1.ResourceName]bool{}
	for name, quantity := range n.Status.Capacity {
		if !v1helper.IsExtendedResourceName(name) {
			continue
		}
		if _, have := allocatable[name]; !have || mirrored[name] {
			if have && allocatable[name].Equal(quantity) {
				added[name] = true
				continue
			}
			allocatable[name] = quantity
			added[name] = true
			changed = true
		}
	}
	for name := range mirrored {
		if _, inCapacity := n.Status.Capacity[name]; !inCapacity {
			delete(allocatable, name)
			changed = true
		}
	}
	s.mu.Lock()
	s.mirrored[n.Name] = added
	s.mu.Unlock()
	if !changed {
		return nil
	}
	n = n.DeepCopy()
	n.Status.Allocatable = allocatable
	_, err := s.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		// Seen again with the next update or list.
		s.mu.Lock()
		s.mirrored[n.Name] = mirrored
		s.mu.Unlock()
	}
	return err
}

func (s *kubeletSimulator) worker(ctx context.Context) {
	for {
		key, quit := s.queue.Get()
		if quit {
			return
		}
		if err := s.syncPod(ctx, key); err != nil {
			klog.V(2).InfoS("pod sync failed", "pod", key, "err", err)
			s.queue.AddRateLimited(key)
		} else {
			s.queue.Forget(key)
		}
		s.queue.Done(key)
	}
}

func (s *kubeletSimulator) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.releaseIP(key)
		return nil
	}
	if err != nil {
		return err
	}
	node, err := s.nodes.Get(pod.Spec.NodeName)
	if err != nil || isVirtualNode(node) || isRealNode(node) {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		// A kubelet confirms the deletion once containers stopped; there are none here,
		// but a preStop sleep hook keeps a real one terminating for its seconds, within
		// the grace period (Kubernetes' e2e preemption specs count on it).
		if wait := preStopSleepLeft(pod, time.Now()); wait > 0 {
			s.queue.AddAfter(key, wait)
			return nil
		}
		err := s.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return nil
	}
	_, err = s.client.CoreV1().Pods(ns).UpdateStatus(ctx, s.runningStatus(key, pod, node), metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// preStopSleepLeft is how long a kubelet would still run the preStop sleep hooks of a
// terminating pod: the longest hook's seconds, at most the grace period, from when the
// deletion began (DeletionTimestamp less the grace period).
func preStopSleepLeft(pod *corev1.Pod, now time.Time) time.Duration {
	if pod.DeletionTimestamp == nil {
		return 0
	}
	var sleep int64
	for _, c := range pod.Spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			sleep = max(sleep, c.Lifecycle.PreStop.Sleep.Seconds)
		}
	}
	if sleep == 0 {
		return 0
	}
	grace := int64(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	sleep = min(sleep, grace)
	began := pod.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
	return began.Add(time.Duration(sleep) * time.Second).Sub(now)
}

func (s *kubeletSimulator) runningStatus(key string, pod *corev1.Pod, node *corev1.Node) *corev1.Pod {
	pod = pod.DeepCopy()
	now := metav1.Now()
	hostIP := "127.0.0.1"
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			hostIP = a.Address
		}
	}
	podIP := s.allocateIP(key)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP = hostIP
	pod.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
	pod.Status.PodIP = podIP
	pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
	pod.Status.StartTime = &now
	setCondition := func(t corev1.PodConditionType) {
		for i := range pod.Status.Conditions {
			if pod.Status.Conditions[i].Type == t {
				pod.Status.Conditions[i].Status = corev1.ConditionTrue
				pod.Status.Conditions[i].LastTransitionTime = now
				return
			}
		}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReadyToStartContainers, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		setCondition(t)
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return pod
}

// allocateIP hands out addresses from 10.244.0.0/16 (only data in pod status), or the
// --pod-address given for the pod.
func (s *kubeletSimulator) allocateIP(key string) string {
	if namespace, name, ok := strings.Cut(key, "/"); ok {
		for _, a := range s.addresses {
			if a.namespace == namespace && strings.HasPrefix(name, a.prefix) {
				return a.ip
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ip, ok := s.ips[key]; ok {
		return ip
	}
	s.nextIP++
	n := s.nextIP%65534 + 1
	ip := fmt.Sprintf("10.244.%d.%d", n>>8, n&0xff)
	s.ips[key] = ip
	return ip
}

func (s *kubeletSimulator) releaseIP(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ips, key)
}
