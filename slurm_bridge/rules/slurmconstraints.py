"""Slurm node-feature constraint expressions (``--constraint``): checked as slurmctld parses
them, and two of them combined with AND.

The constraints annotation is checked here at admission, and the job request ANDs it with the
node features the pods' placement requires (:mod:`slurm_bridge.rules.nodeplacement`). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

from slurm_bridge import names

__all__ = ["check_constraint", "combine_constraints"]

_HELP: Final = 'expected a Slurm constraint such as "a100", "intel&ib", "rack1|rack2", "[rack1|rack2]" or "(a|b)&c"'
_TOKEN = re.compile(r"[()\[\]&|,]|\*[0-9]*|[^()\[\]&|,*\s]+|\s+")
_FEATURE_LABEL: Final = names.LABEL_NODE_FEATURE_PREFIX + "<feature>"


def check_constraint(value: str) -> str:
    """``value`` when slurmctld's feature parser would accept it; ValueError saying what is wrong
    and the forms expected otherwise.

    Mirrors the rules of that parser that do not depend on the cluster: balanced grouping, no
    nested parentheses, one bracket set never inside parentheses, an operand on both sides of
    every operator, counts only after a feature.
    """

    def bad(why: str) -> ValueError:
        return ValueError(f"{why}; {_HELP}")

    if not value:
        raise bad("the expression is empty")
    open_groups: list[str] = []
    brackets_seen = False
    need_operand = True
    prev = ""
    for tok in _TOKEN.findall(value):
        if tok.isspace():
            raise bad("features and operators cannot be separated by whitespace")
        if tok in ("(", "["):
            if not need_operand:
                raise bad(f"an operator is missing before {tok!r}")
            if tok == "(" and "(" in open_groups:
                raise bad("Slurm does not allow nested parentheses")
            if tok == "[":
                if open_groups:
                    raise bad("Slurm does not allow brackets inside parentheses")
                if brackets_seen:
                    raise bad("Slurm allows only one set of brackets")
                brackets_seen = True
            open_groups.append(tok)
        elif tok in (")", "]"):
            if need_operand:
                raise bad(f"a feature is missing before {tok!r}")
            if not open_groups or open_groups.pop() != {")": "(", "]": "["}[tok]:
                raise bad(f"unbalanced {tok!r}")
            need_operand = False
        elif tok in ("&", "|", ","):
            if need_operand:
                raise bad(f"a feature is missing before {tok!r}")
            need_operand = True
        elif tok.startswith("*"):
            if need_operand or prev in (")", "]") or prev.startswith("*"):
                raise bad("a '*count' must follow a feature name")
            if tok == "*" or int(tok[1:]) < 1:
                raise bad("a '*' must be followed by a node count >= 1")
        else:
            if not need_operand:
                raise bad(f"an operator is missing before {tok!r}")
            need_operand = False
        prev = tok
    if need_operand:
        raise bad("the expression ends with an operator")
    if open_groups:
        raise bad(f"unbalanced {open_groups[-1]!r}")
    return value


def _top_level_or(expression: str) -> bool:
    depth = 0
    for c in expression:
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
    return False


def combine_constraints(given: str | None, features: str | None) -> str | None:
    """``given`` (the constraints annotation) AND the features the pods require.

    A part with an OR at its top level is parenthesised, so the result means the same whether
    Slurm reads the operators left to right or AND first. Slurm allows no nested parentheses (and
    no brackets inside them), so a part that needs them and already has some cannot be combined:
    ValueError says to write the whole condition in the annotation instead.
    """
    if not features:
        return given
    if not given:
        return features
    parts = []
    for part in (given, features):
        if _top_level_or(part):
            if any(c in part for c in "()[]"):
                raise ValueError(
                    f"{names.ANN_CONSTRAINTS} ({given}) and the node features the pods require ({features}) "
                    "cannot be combined with AND without nesting parentheses, which Slurm does not allow; write "
                    f"the whole condition in the annotation and remove the {_FEATURE_LABEL} requirements from "
                    "the pods' nodeSelector and node affinity"
                )
            part = f"({part})"
        parts.append(part)
    return "&".join(parts)
