"""docs/performance.md's tables over several runs (min - max), from what the benches print with --json.

    .venv/bin/python bench/summarize.py run1.json run2.json ...

Each file is one run of a bench: bench/pipeline_latency.py --json (its steady rates, bursts, queued
profiles, creates in a burst and what a pod costs), bench/admission.py --json, bench/node_sharing.py
--json, bench/gpus.py --json, or what bench/scale.py printed (its last report). First the page's
tables, in its shape (bench/pagetables.py, the same tables each bench prints at the end of one run),
ready to paste; then, for each (mode, scheduler) of pipeline_latency.py's runs, every field: the
latencies, pods/s and ratio, API writes and Slurm calls per pod, the operator's and the machine's
CPU per pod and the CPU ratio, the machine's CPU a bridge pod adds over a default pod's,
kube-apiserver's CPU per pod and its ratio, the API server's pod watchers, the default
scheduler's client settings, the idle baseline and steal per pod, each process's own CPU apart
from its children's, and for the bridge's rows the breakdown of a pod's start (p50 and p99 of each
step).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
from pagetables import Row, Run, span

FIELDS = (
    "p50_s", "p99_s", "released_p50_s", "pods_per_s", "ratio_to_default", "create_span_s", "api_writes_per_pod",
    "slurm_calls_per_pod", "slurm_calls_per_pod_lifecycle", "operator_cpu_ms_per_pod", "machine_cpu_ms_per_pod",
    "machine_cpu_ratio", "added_cpu_ms_per_pod", "apiserver_cpu_ratio", "pod_watchers",
)  # fmt: skip


class Runs:
    """The runs read, by the bench that made them."""

    def __init__(self) -> None:
        self.pipeline: list[Run] = []
        self.admission: list[Row] = []
        self.sharing: list[Run] = []
        self.gpus: list[Run] = []
        self.scale: list[Row] = []

    def add(self, text: str, source: str = "") -> None:
        """One file: one JSON document, or several (bench/scale.py's lines and its last report)."""
        docs, decoder, at = [], json.JSONDecoder(), 0
        while at < len(text):
            if text[at].isspace():
                at += 1
                continue
            try:
                doc, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                at = text.find("\n", at) + 1 or len(text)  # a line that is not JSON (a table): skip it
                continue
            if isinstance(doc, dict | list):  # not a number or a word that began a line of text
                docs.append(doc)
        reports = [d for d in docs if isinstance(d, dict) and "kwok_nodes" in d]
        if reports:
            self.scale.append(reports[-1])  # the last report has every phase
            return
        for doc in docs:
            if isinstance(doc, dict) and "through the webhook" in doc:
                self.admission.append(doc)
            elif isinstance(doc, list) and doc and all(isinstance(r, dict) for r in doc):
                if "scheduler" in doc[0]:
                    self.pipeline.append(doc)
                elif "profile" in doc[0]:
                    self.gpus.append(doc)
                elif "mode" in doc[0]:
                    self.sharing.append(doc)
                else:
                    print(f"{source}: rows of no bench this knows", file=sys.stderr)
            else:
                print(f"{source}: not a bench's --json output", file=sys.stderr)

    def tables(self) -> list[str]:
        """docs/performance.md's tables, filled with these runs' min - max: the page and the
        bench say the same thing in the same shape."""
        return [
            *pagetables.steady_tables(self.pipeline),
            *pagetables.burst_table(self.pipeline),
            *pagetables.queued_table(self.pipeline),
            *pagetables.creates_table(self.admission, self.pipeline),
            *pagetables.costs_table(self.pipeline),
            *pagetables.sharing_table(self.sharing),
            *pagetables.gpus_table(self.gpus),
            *pagetables.scale_table(self.scale),
        ]


def cpu_lines(runs: list[dict[str, Any]]) -> list[str]:
    """What the runs that recorded them say of the comparison: the default scheduler's client
    (stock, or the bench's own at the bridge's qps/burst), the machine's idle baseline and steal,
    and each process's own CPU apart from its children's."""
    out = []
    clients = sorted({str(r["default_client"]) for r in runs if r.get("default_client")})
    if clients:
        out.append(f"{'default scheduler client':32} {', '.join(clients)}")
    for key in ("idle baseline", "steal"):
        got = [r["cpu_ms_per_pod"][key] for r in runs if key in (r.get("cpu_ms_per_pod") or {})]
        if got:
            out.append(f"{key + ' CPU ms/pod':32} {span(got)}")
    split: dict[str, list[list[float]]] = defaultdict(list)
    for r in runs:
        for name, pair in (r.get("cpu_ms_per_pod_own_children") or {}).items():
            split[name].append(list(pair))
    for name, pairs in sorted(split.items()):
        own, children = span([p[0] for p in pairs]), span([p[1] for p in pairs])
        out.append(f"{name + ' own / children ms/pod':32} {own} / {children}")
    return out


def main() -> None:
    read = Runs()
    for path in sys.argv[1:]:
        read.add(Path(path).read_text(), path)
    print("\n".join(read.tables()))
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)  # by profile, as the cost table's columns
    for run in read.pipeline:
        for row in run:
            kind, mode, pods = pagetables.kind(row), row["mode"], row.get("pods")
            if kind == "default":
                profile = f"{pods or 0:,}-pod burst" if mode == "burst" else mode
            else:
                profile = pagetables.column_name(mode, pods, kind)
            rows[f"{profile}: {row['scheduler']}"].append(row)
    for profile, runs in rows.items():
        print(f"## {profile} ({pagetables.runs_count(len(runs))})")
        for f in FIELDS:
            values = [r[f] for r in runs if isinstance(r.get(f), int | float)]
            if values:
                print(f"  {f:32} {span(values)}")
        api = [r["cpu_ms_per_pod"].get("kube-apiserver") for r in runs if r.get("cpu_ms_per_pod")]
        print(f"  {'kube-apiserver CPU ms/pod':32} {span([a for a in api if a is not None])}")
        for name in ("slurmctld", "slurmrestd", "bridge-webhook"):
            got = [r["cpu_ms_per_pod"].get(name) for r in runs if r.get("cpu_ms_per_pod")]
            print(f"  {name + ' CPU ms/pod':32} {span([a for a in got if a is not None])}")
        for line in cpu_lines(runs):
            print(f"  {line}")
        deletes = [r.get("slurm_calls_lifecycle_by_kind", {}).get("DELETE /job/{id}") for r in runs]
        if any(d is not None for d in deletes):
            per_pod = [d / r["pods"] for d, r in zip(deletes, runs, strict=True) if d]
            print(f"  {'DELETE /job/{id} per pod':32} {span(per_pod)}")
        steps = [r["breakdown"] for r in runs if r.get("breakdown")]
        if steps:
            hinted = [s.get("read_after_hint") for s in steps]
            signed = [s.get("taken_from_signed_hint") for s in steps]
            print(f"  placed: {[s.get('paths') for s in steps]}; read after the hint: {hinted}; taken signed: {signed}")
            for name in steps[0]:
                if isinstance(steps[0][name], dict) and "p50" in steps[0][name]:
                    p50 = [s[name]["p50"] for s in steps if name in s]
                    p99 = [s[name]["p99"] for s in steps if name in s]
                    print(f"  {name:40} p50 {span(p50):>16}   p99 {span(p99)}")


if __name__ == "__main__":
    main()
