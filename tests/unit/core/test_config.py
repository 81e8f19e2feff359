"""The config model: Go slurm-bridge keys, defaults, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_bridge.core.config import Config, ConfigError, LabelSelector, load_config, parse_config, split_listen


def test_go_slurm_bridge_keys_are_accepted() -> None:
    cfg = parse_config(
        {
            "schedulerName": "slurm-bridge",
            "slurmRestApi": "http://slurm-restapi.slurm:6820/",
            "managedNamespaces": ["slurm-bridge", "hpc"],
            "mcsLabel": "kubernetes",
            "partition": "slurm-bridge",
        }
    )
    assert cfg.slurmRestApi == "http://slurm-restapi.slurm:6820"
    assert cfg.is_managed_namespace("hpc", {})
    assert not cfg.is_managed_namespace("default", {})


def test_selector_takes_precedence_over_the_list() -> None:
    cfg = parse_config({"managedNamespaces": ["a"], "managedNamespaceSelector": {"matchLabels": {"hpc": "yes"}}})
    assert cfg.is_managed_namespace("b", {"hpc": "yes"})
    assert not cfg.is_managed_namespace("a", {})
    assert cfg.namespace_selector.to_kubernetes() == {"matchLabels": {"hpc": "yes"}}


def test_list_becomes_a_metadata_name_selector() -> None:
    sel = parse_config({"managedNamespaces": ["a", "b"]}).namespace_selector.to_kubernetes()
    assert sel == {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"tier": "hpc", "team": "x"}, True),
        ({"tier": "web", "team": "x"}, False),
        ({"tier": "hpc"}, False),
        ({"tier": "hpc", "team": "x", "legacy": "1"}, False),
    ],
)
def test_label_selector_expressions(labels: dict[str, str], expected: bool) -> None:
    sel = LabelSelector.model_validate(
        {
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["hpc"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ]
        }
    )
    assert sel.matches(labels) is expected


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"schedulerName": "Slurm_Bridge"}, "schedulerName"),
        ({"slurmRestApi": "slurm:6820"}, "slurmRestApi"),
        ({"pollPeriodSeconds": 5}, "pollPeriodSeconds"),
        ({"pollPeriodSeconds": 0}, "pollPeriodSeconds"),
        ({"managedNamespaces": ["Bad_NS"]}, "managedNamespaces"),
        ({"managedNamespaces": ["a" * 64]}, "at most 63"),
        ({"schedulerName": "a" * 64}, "schedulerName"),
        ({"bridgeId": "a-"}, "bridgeId"),
        ({"webhookListen": "9443"}, "webhookListen"),
        ({"partitoin": "x"}, "partitoin: unknown key"),
        ({"managedNamespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "non-empty"),
    ],
)
def test_bad_values_name_the_key(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert needle in str(err.value)


def test_names_at_the_dns_label_limit_are_accepted() -> None:
    cfg = parse_config({"managedNamespaces": ["n" * 63], "schedulerName": "s" * 63, "bridgeId": "b" * 63})
    assert (cfg.managedNamespaces, cfg.schedulerName, cfg.bridgeId) == (["n" * 63], "s" * 63, "b" * 63)


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedulerName: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- a\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(top)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty) == Config()


@pytest.mark.parametrize(
    ("listen", "expected"),
    [(":9443", ("0.0.0.0", 9443)), ("127.0.0.1:8090", ("127.0.0.1", 8090)), ("[::1]:80", ("::1", 80))],
)
def test_split_listen(listen: str, expected: tuple[str, int]) -> None:
    assert split_listen(listen) == expected
