"""Min - max over several runs of bench/pipeline_latency.py --json (the tables of docs/performance.md).

    .venv/bin/python bench/summarize.py run1.json run2.json ...

First the page's own tables, in its shape (``tables``: a steady rate, bursts, what a pod costs),
ready to paste; then, for each (mode, scheduler), every field: the latencies, pods/s and ratio, API
writes and Slurm calls per pod, the operator's and the machine's CPU per pod and the CPU ratio,
kube-apiserver's CPU per pod, and for the bridge's rows the breakdown of a pod's start (p50 and p99
of each step).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

FIELDS = (
    "p50_s", "p99_s", "released_p50_s", "pods_per_s", "ratio_to_default", "create_span_s", "api_writes_per_pod",
    "slurm_calls_per_pod", "slurm_calls_per_pod_lifecycle", "operator_cpu_ms_per_pod", "machine_cpu_ms_per_pod",
    "machine_cpu_ratio",
)  # fmt: skip


def span(values: list[float]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g} - {hi:g}"


Runs = dict[tuple[str, str], list[dict[str, Any]]]
TIMES = "\N{MULTIPLICATION SIGN}"


def field(runs: list[dict[str, Any]], name: str, unit: str = "", scale: float = 1.0) -> str:
    values = [round(r[name] * scale, 3) for r in runs if isinstance(r.get(name), int | float)]
    return f"{span(values)}{unit}" if values else "-"


def tables(rows: Runs) -> list[str]:
    """docs/performance.md's tables (pods at a steady rate, bursts, what a pod costs), filled with
    these runs' min - max: the page and the bench say the same thing in the same shape."""
    bridges = sorted({s for _, s in rows if s != "default-scheduler"})
    modes = list(dict.fromkeys(m for m, _ in rows))
    out: list[str] = []
    steady = [m for m in modes if m != "burst"]
    if steady:
        out += ["| pods (runs) | create → bound p50 | p99 | pods/s |", "| --- | --- | --- | --- |"]
        for mode in steady:
            for who in [*bridges, "default-scheduler"]:
                runs = rows.get((mode, who), [])
                if runs:
                    out.append(f"| {who}, {mode} ({len(runs)}) | {field(runs, 'p50_s', ' s')} | "
                               f"{field(runs, 'p99_s', ' s')} | {field(runs, 'pods_per_s')} |")  # fmt: skip
        out.append("")
    if "burst" in modes:
        out += ["| burst (runs) | the bridge, pods/s | default, pods/s | **ratio** |", "| --- | --- | --- | --- |"]
        default = rows.get(("burst", "default-scheduler"), [])
        for who in bridges:
            runs = rows.get(("burst", who), [])
            if runs:
                pods = sorted({int(r["pods"]) for r in runs if r.get("pods")})
                label = f"{'/'.join(str(n) for n in pods)} pods, {who} ({len(runs)})"
                out.append(f"| {label} | {field(runs, 'pods_per_s')} | {field(default, 'pods_per_s')} | "
                           f"**{field(runs, 'ratio_to_default')}** |")  # fmt: skip
        out.append("")
    costs = (("API writes", "api_writes_per_pod", ""), ("Slurm calls while it starts", "slurm_calls_per_pod", ""),
             ("Slurm calls over its whole life", "slurm_calls_per_pod_lifecycle", ""),
             ("the operator's CPU", "operator_cpu_ms_per_pod", " ms"),
             ("the machine's CPU, over the default scheduler's", "machine_cpu_ratio", TIMES))  # fmt: skip
    columns = [(m, b) for m in modes for b in bridges if rows.get((m, b))]
    if columns:
        out.append("| per pod (runs) | " + " | ".join(f"{b}, {m} ({len(rows[(m, b)])})" for m, b in columns) + " |")
        out.append("| --- |" + " --- |" * len(columns))
        for label, name, unit in costs:
            out.append(f"| {label} | " + " | ".join(field(rows[c], name, unit) for c in columns) + " |")
    return out


def main() -> None:
    rows: Runs = defaultdict(list)
    for path in sys.argv[1:]:
        with open(path) as stream:
            for row in json.load(stream):
                rows[(row["mode"], row["scheduler"])].append(row)
    print("\n".join(tables(rows)))
    print()
    for (mode, scheduler), runs in rows.items():
        print(f"## {mode} {scheduler} ({len(runs)} runs)")
        for f in FIELDS:
            values = [r[f] for r in runs if isinstance(r.get(f), int | float)]
            if values:
                print(f"  {f:32} {span(values)}")
        api = [r["cpu_ms_per_pod"].get("kube-apiserver") for r in runs if r.get("cpu_ms_per_pod")]
        print(f"  {'kube-apiserver CPU ms/pod':32} {span([a for a in api if a is not None])}")
        for name in ("slurmctld", "slurmrestd", "bridge-webhook"):
            got = [r["cpu_ms_per_pod"].get(name) for r in runs if r.get("cpu_ms_per_pod")]
            print(f"  {name + ' CPU ms/pod':32} {span([a for a in got if a is not None])}")
        deletes = [r.get("slurm_calls_lifecycle_by_kind", {}).get("DELETE /job/{id}") for r in runs]
        if any(d is not None for d in deletes):
            per_pod = [d / r["pods"] for d, r in zip(deletes, runs, strict=True) if d]
            print(f"  {'DELETE /job/{id} per pod':32} {span(per_pod)}")
        steps = [r["breakdown"] for r in runs if r.get("breakdown")]
        if steps:
            print(
                f"  placed: {[s['paths'] for s in steps]}; read after the hint: {[s['read_after_hint'] for s in steps]}"
            )
            for name in steps[0]:
                if isinstance(steps[0][name], dict) and "p50" in steps[0][name]:
                    p50 = [s[name]["p50"] for s in steps if name in s]
                    p99 = [s[name]["p99"] for s in steps if name in s]
                    print(f"  {name:40} p50 {span(p50):>16}   p99 {span(p99)}")


if __name__ == "__main__":
    main()
