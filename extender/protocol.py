"""kube-scheduler extender v1 wire format (JSON keys are the Go field names, PascalCase)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class NodeList(_Wire):
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Wire):
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class ExtenderBindingArgs(_Wire):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(_Wire):
    Error: str = ""
