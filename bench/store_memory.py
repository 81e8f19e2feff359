"""Memory of the operator's stores, whole objects against projections, without a cluster.

Fills the three stores with N pods, N PlaceholderJobs and M nodes shaped like what the local
cluster's API server returns for the benchmark's objects (a running bridge pod with its service
account volume, default tolerations, managedFields and container statuses; a PlaceholderJob with
its status; a kwok node), decoded from JSON as the watch decodes them, and prints the Python heap
each takes (tracemalloc) with ``project`` and without it.

    .venv/bin/python bench/store_memory.py [--objects 10000] [--nodes 1000]
    .venv/bin/python bench/store_memory.py --rss projected   # a process's RSS: imports + stores
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tracemalloc
from typing import Any

from slurm_bridge.operator.runtime import store as store_module
from slurm_bridge.operator.runtime.store import ObjectStore

MANAGED = [
    {"manager": m, "operation": op, "apiVersion": "v1", "time": "2026-11-23T00:00:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:x": {}}}, "f:spec": {f"f:{k}": {} for k in keys}}}
    for m, op, keys in (
        ("python-requests", "Update", ["containers", "restartPolicy", "tolerations", "schedulerName"]),
        ("slurm-bridge-operator", "Update", ["schedulingGates"]),
        ("kwok", "Update", ["status", "conditions", "containerStatuses", "hostIP", "podIP", "startTime"]),
    )
]  # fmt: skip


def admitted_pod_spec(**extra: Any) -> dict[str, Any]:
    """The benchmark pod's spec as the API server stores it once the bridge's webhook admitted it
    (defaults, the service account volume, the bridge's scheduler and toleration); ``extra``
    adds fields (a node, a scheduling gate). bench/replay.py uses it too."""
    return {
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                         "fieldPath": "metadata.namespace"}}]}},
        ], "defaultMode": 420}}],
        "containers": [{
            "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "Always",
        }],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
        "schedulerName": "slurm-bridge",
        "tolerations": [
            {"key": "slinky.slurm.net/managed-node", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        **extra,
    }  # fmt: skip


def pod(i: int) -> dict[str, Any]:
    name = f"b{i:05d}"
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": "bench-bridge-123456", "uid": f"6f1c2a4e-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100000 + i), "creationTimestamp": "2026-11-23T00:00:00Z",
            "labels": {"scheduler.slinky.slurm.net/slurm-jobid": str(i + 1),
                       "scheduler.slinky.slurm.net/placeholderjob": name},
            "annotations": {"slinky.slurm.net/slurm-node": f"kwok-node-{i % 4 + 1}"},
            "managedFields": MANAGED,
        },
        "spec": admitted_pod_spec(nodeName=f"kwok-node-{i % 4 + 1}"),
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-11-23T00:00:01Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}],
            "startTime": "2026-11-23T00:00:01Z", "qosClass": "Burstable",
            "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "2026-11-23T00:00:01Z"}},
                                   "lastState": {}, "ready": True, "restartCount": 0, "image": "busybox",
                                   "imageID": "", "started": True}],
        },
    }  # fmt: skip


def phj(i: int) -> dict[str, Any]:
    name = f"b{i:05d}"
    return {
        "apiVersion": "slinky.slurm.net/v1alpha1", "kind": "PlaceholderJob",
        "metadata": {
            "name": name, "namespace": "bench-bridge-123456", "uid": f"7a1c2a4e-0000-4000-8000-{i:012d}",
            "resourceVersion": str(200000 + i), "generation": 1, "creationTimestamp": "2026-11-23T00:00:00Z",
            "finalizers": ["slinky.slurm.net/placeholderjob"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"6f1c-{i}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": MANAGED[:2],
        },
        "spec": {"pods": [name], "podUIDs": {name: f"6f1c-{i}"},
                 "slurm": {"nodes": 1, "cpusPerTask": 1, "memoryPerNodeMiB": 64, "partition": "slurm-bridge"}},
        "status": {
            "jobId": i + 1, "phase": "Running", "slurmState": "RUNNING", "reason": "",
            "message": f"Slurm job {i + 1} allocated kwok-node-1", "nodeList": "kwok-node-1", "podList": name,
            "assignments": [{"pod": name, "node": "kwok-node-1"}], "submitTime": "2026-11-23T00:00:00Z",
            "startTime": "2026-11-23T00:00:00Z", "observedGeneration": 1,
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "m" * 40,
                            "lastTransitionTime": "2026-11-23T00:00:00Z"} for t in ("Submitted", "Allocated", "Ready")],
        },
    }  # fmt: skip


def node(i: int) -> dict[str, Any]:
    res = {"cpu": "64", "memory": "262144Mi", "pods": "110"}
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": f"kwok-node-{i}", "uid": f"n-{i}", "resourceVersion": str(300000 + i),
                     "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-node-{i}", "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "feature.slinky.slurm.net/kwok": "true"},
                     "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "managedFields": MANAGED},
        "spec": {"taints": [{"key": "slinky.slurm.net/managed-node", "value": "slurm-bridge", "effect": "NoExecute"}]},
        "status": {"capacity": res, "allocatable": res,
                   "conditions": [{"type": t, "status": "False", "lastHeartbeatTime": "2026-11-23T00:00:00Z",
                                   "lastTransitionTime": "2026-11-23T00:00:00Z", "reason": t, "message": "kwok"}
                                  for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure",
                                            "NetworkUnavailable")],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {k: "kwok" for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
                                                     "containerRuntimeVersion", "kubeletVersion", "architecture")}},
    }  # fmt: skip


def measure(objects: int, nodes: int) -> int:
    gc.collect()
    tracemalloc.start()
    stores = (ObjectStore(), ObjectStore(), ObjectStore())
    for i in range(objects):
        stores[0].upsert(json.loads(json.dumps(pod(i))))  # fresh strings, as a watch decodes them
        stores[1].upsert(json.loads(json.dumps(phj(i))))
    for i in range(nodes):
        stores[2].upsert(json.loads(json.dumps(node(i))))
    gc.collect()
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def process_rss(objects: int, nodes: int, whole: bool) -> dict[str, float]:
    """RSS of a process that imports the whole operator (kopf, aiohttp, pydantic, the Slurm
    client), then fills the stores: the operator's memory without its watches' own buffers."""
    import slurm_bridge.operator.wiring.app  # noqa: F401  (everything the operator process imports)

    if whole:
        store_module.project = lambda obj: obj
    base = rss_mib()
    stores = (ObjectStore(), ObjectStore(), ObjectStore())
    for i in range(objects):
        stores[0].upsert(json.loads(json.dumps(pod(i))))
        stores[1].upsert(json.loads(json.dumps(phj(i))))
    for i in range(nodes):
        stores[2].upsert(json.loads(json.dumps(node(i))))
    gc.collect()
    return {"imported_mib": round(base, 1), "filled_mib": round(rss_mib(), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=10000, help="pods, and as many PlaceholderJobs")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rss", choices=["whole", "projected"], help="one process's RSS instead (run each in its own)")
    args = ap.parse_args()
    if args.rss:
        print(json.dumps({"stores": args.rss, **process_rss(args.objects, args.nodes, args.rss == "whole")}))
        return
    projected = measure(args.objects, args.nodes)
    real = store_module.project
    store_module.project = lambda obj: obj  # the stores as they were: whole objects
    try:
        whole = measure(args.objects, args.nodes)
    finally:
        store_module.project = real
    sizes = {k: len(json.dumps(f(1))) for k, f in (("pod", pod), ("placeholderjob", phj), ("node", node))}
    print(json.dumps({
        "pods": args.objects, "placeholderjobs": args.objects, "nodes": args.nodes, "json_bytes_each": sizes,
        "whole_objects_mib": round(whole / 2**20, 1), "projections_mib": round(projected / 2**20, 1),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
