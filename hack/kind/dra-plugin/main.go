// Command dra-plugin is the kind cluster's test DRA kubelet plugin for driver gpu.nvidia.com
// (docs/gpus.md#gpus-on-the-kind-workers). The workers have no GPU: slurmd serves stand-in device
// files (hack/cluster/gpus.py's layout), and this plugin plays the NVIDIA DRA driver's node part
// for the same GPUs, so that a real kubelet starts pods whose claims name them:
//
//   - it registers with the kubelet's plugin registry as gpu.nvidia.com;
//   - it publishes its node's devices, exactly as the layout file gives them (gpus.py's devices,
//     hack/kind/gpu_layout.py plugin-layout), as the ResourceSlices of one pool named after the node;
//   - it prepares a claim the kubelet hands it by writing a CDI spec for the claim: the env
//     NVIDIA_VISIBLE_DEVICES=<the allocated devices' uuids> and each device's stand-in device node
//     (the file slurmd's gres.conf names, same major and minor), and unprepares it by removing it.
//
// It publishes nothing but the configured layout, prepares only devices of its own pool, and refuses
// a device another prepared claim holds. It does not isolate anything: there is no GPU.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const (
	driverName = "gpu.nvidia.com"
	cdiVendor  = "k8s." + driverName // CDI kind k8s.gpu.nvidia.com/claim, as NVIDIA's driver names its own
	cdiClass   = "claim"
)

// deviceFile is the stand-in device file of a device: gres.conf's File= for the same GPU or instance.
type deviceFile struct {
	Path  string `json:"path"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

type layoutDevice struct {
	Device resourceapi.Device `json:"device"`
	File   deviceFile         `json:"file"`
}

type layout struct {
	Driver string                    `json:"driver"`
	Nodes  map[string][]layoutDevice `json:"nodes"`
}

type plugin struct {
	node     string
	devices  map[string]layoutDevice // this node's, by device name
	stateDir string                  // the prepared claims: one file per claim UID, listing its devices
	cdiDir   string
	cancel   context.CancelCauseFunc
	mu       sync.Mutex
}

func readLayout(path, node string) ([]layoutDevice, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a field gpus.py adds must be known here, not dropped
	var l layout
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if l.Driver != driverName {
		return nil, fmt.Errorf("%s is the layout of driver %q, not %q", path, l.Driver, driverName)
	}
	return l.Nodes[node], nil
}

// held returns the devices of every prepared claim but one: claim UID -> device names.
func (p *plugin) held(except types.UID) (map[string]string, error) {
	out := map[string]string{}
	entries, err := os.ReadDir(p.stateDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		uid := strings.TrimSuffix(e.Name(), ".json")
		if uid == string(except) || uid == e.Name() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(p.stateDir, e.Name()))
		if err != nil {
			return nil, err
		}
		var names []string
		if err := json.Unmarshal(raw, &names); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		for _, n := range names {
			out[n] = uid
		}
	}
	return out, nil
}

func (p *plugin) cdiPath(uid types.UID) string {
	return filepath.Join(p.cdiDir, fmt.Sprintf("%s-%s_%s.json", cdiVendor, cdiClass, uid))
}

func writeAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// prepare checks the claim's devices of this driver and writes its CDI spec and state.
func (p *plugin) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driverName {
			results = append(results, r)
		}
	}
	held, err := p.held(claim.UID)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("reading the prepared claims: %w", err)}
	}
	var uuids, names []string
	var nodes []map[string]any
	for _, r := range results {
		d, ok := p.devices[r.Device]
		if r.Pool != p.node || !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s/%s is not one this plugin publishes on node %s", r.Pool, r.Device, p.node)}
		}
		shared := d.Device.AllowMultipleAllocations != nil && *d.Device.AllowMultipleAllocations
		if other, taken := held[r.Device]; taken && !shared {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s is prepared for claim %s already", r.Device, other)}
		}
		uuid := d.Device.Attributes["uuid"].StringValue
		if uuid == nil {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("device %s has no uuid attribute", r.Device)}
		}
		uuids = append(uuids, *uuid)
		names = append(names, r.Device)
		nodes = append(nodes, map[string]any{"path": d.File.Path, "type": "c", "major": d.File.Major, "minor": d.File.Minor, "permissions": "rw"})
	}
	spec := map[string]any{
		"cdiVersion": "0.6.0",
		"kind":       cdiVendor + "/" + cdiClass,
		"devices": []any{map[string]any{
			"name": string(claim.UID),
			"containerEdits": map[string]any{
				"env":         []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")},
				"deviceNodes": nodes,
			},
		}},
	}
	state, _ := json.Marshal(names)
	cdi, _ := json.MarshalIndent(spec, "", " ")
	if err := writeAtomically(filepath.Join(p.stateDir, string(claim.UID)+".json"), state); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	if err := writeAtomically(p.cdiPath(claim.UID), cdi); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	// One CDI device per claim, named by its UID (never reused): every request gets all of them.
	id := fmt.Sprintf("%s/%s=%s", cdiVendor, cdiClass, claim.UID)
	out := kubeletplugin.PrepareResult{}
	for _, r := range results {
		out.Devices = append(out.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{id},
		})
	}
	klog.Infof("prepared claim %s/%s (%s): devices %v, NVIDIA_VISIBLE_DEVICES=%s", claim.Namespace, claim.Name, claim.UID, names, strings.Join(uuids, ","))
	return out
}

func (p *plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.UID] = p.prepare(c)
	}
	return out, nil
}

func (p *plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		var errs []error
		for _, path := range []string{p.cdiPath(c.UID), filepath.Join(p.stateDir, string(c.UID)+".json")} {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		out[c.UID] = errors.Join(errs...)
		klog.Infof("unprepared claim %s (%s)", c.NamespacedName, c.UID)
	}
	return out, nil
}

func (p *plugin) HandleError(_ context.Context, err error, msg string) {
	klog.Errorf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

func (p *plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func run() error {
	layoutPath := flag.String("layout", "/etc/gpu-layout/layout.json", "the layout (hack/kind/gpu_layout.py plugin-layout)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the container runtime reads CDI specs")
	klog.InitFlags(nil)
	flag.Parse()
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("NODE_NAME is not set (the downward API's spec.nodeName)")
	}
	devices, err := readLayout(*layoutPath, node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	p := &plugin{node: node, devices: map[string]layoutDevice{}, cdiDir: *cdiDir, cancel: cancel,
		stateDir: filepath.Join(kubeletplugin.KubeletPluginsDir, driverName, "claims")}
	published := make([]resourceapi.Device, 0, len(devices))
	for _, d := range devices {
		p.devices[d.Device.Name] = d
		published = append(published, d.Device)
	}
	for _, dir := range []string{p.stateDir, p.cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, p, kubeletplugin.DriverName(driverName), kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(client), kubeletplugin.HealthService(false))
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	// A node without GPUs in the layout publishes an empty pool: stale slices of an earlier layout go.
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: published}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}); err != nil {
		return err
	}
	names := make([]string, 0, len(p.devices))
	for n := range p.devices {
		names = append(names, n)
	}
	sort.Strings(names)
	klog.Infof("driver %s registered on node %s; publishing %d devices %v", driverName, node, len(names), names)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-signals:
		klog.Infof("%s: stopping", s)
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func main() {
	if err := run(); err != nil {
		klog.Errorf("dra-plugin: %v", err)
		klog.Flush()
		os.Exit(1)
	}
}
