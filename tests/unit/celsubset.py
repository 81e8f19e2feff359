"""A small evaluator of the CEL subset the bridge's admission rules use, so that unit tests run the
rules' own text on tables of objects, with no API server.

The subset: string, bool and list literals; field access and map indexing (a missing field or key
is an error, as in CEL, so an unguarded access fails the test); ``has()``; ``!``, ``&&``, ``||``
(commutative over errors, as CEL's), ``==``, ``!=``, ``in``, ``? :``; the ``exists`` macro (over a
list, or a map's keys) and ``startsWith``; ``variables.NAME`` evaluated lazily, in a
ValidatingAdmissionPolicy's order. Anything else is a syntax error here; the e2e tests run the same
rules in a real API server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"(?:[^\"\\]|\\.)*\")|(?P<op>&&|\|\||==|!=|[!?:()\[\],.])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)


class CelError(Exception):
    """An evaluation error (no such field or key, a wrong type), as CEL raises."""


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str


def _tokens(src: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(src):
        if src[pos:].strip() == "":
            break
        m = _TOKEN.match(src, pos)
        if not m:
            raise SyntaxError(f"unexpected text at {pos}: {src[pos : pos + 30]!r}")
        kind = next(k for k in ("str", "op", "id") if m.group(k) is not None)
        out.append(_Tok(kind, m.group(kind)))
        pos = m.end()
    return out


Env = Mapping[str, Any]
Node = Callable[[Env], Any]


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _tokens(src)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i].text if self.i < len(self.toks) else None

    def take(self, text: str | None = None) -> _Tok:
        if self.i >= len(self.toks):
            raise SyntaxError(f"unexpected end, wanted {text!r}")
        tok = self.toks[self.i]
        if text is not None and tok.text != text:
            raise SyntaxError(f"wanted {text!r}, got {tok.text!r} at token {self.i}")
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.expr()
        if self.peek() is not None:
            raise SyntaxError(f"trailing {self.peek()!r}")
        return node

    def expr(self) -> Node:
        cond = self.logic("||")
        if self.peek() != "?":
            return cond
        self.take("?")
        yes = self.logic("||")
        self.take(":")
        no = self.expr()
        return lambda env: yes(env) if _bool(cond(env)) else no(env)

    def logic(self, op: str) -> Node:
        def sub() -> Node:
            return self.logic("&&") if op == "||" else self.relation()

        node = sub()
        while self.peek() == op:
            self.take(op)
            node = _or(node, sub()) if op == "||" else _and(node, sub())
        return node

    def relation(self) -> Node:
        node = self.unary()
        while self.peek() in ("==", "!=", "in"):
            op, right, left = self.take().text, self.unary(), node
            if op == "==":
                node = _bin(left, right, lambda a, b: a == b)
            elif op == "!=":
                node = _bin(left, right, lambda a, b: a != b)
            else:
                node = _bin(left, right, _in)
        return node

    def unary(self) -> Node:
        if self.peek() == "!":
            self.take("!")
            inner = self.unary()
            return lambda env: not _bool(inner(env))
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while self.peek() in (".", "["):
            if self.take().text == "[":
                index, obj = self.expr(), node
                self.take("]")
                node = _bin(obj, index, _index)
                continue
            name, obj = self.take().text, node
            if self.peek() != "(":
                node = (lambda o, n: lambda env: _field(o(env), n))(obj, name)
            elif name == "exists":
                self.take("(")
                var = self.take().text
                self.take(",")
                pred = self.expr()
                self.take(")")
                node = _exists(obj, var, pred)
            elif name == "startsWith":
                self.take("(")
                prefix = self.expr()
                self.take(")")
                node = _bin(obj, prefix, lambda s, p: _str(s).startswith(_str(p)))
            else:
                raise SyntaxError(f"method {name} is not in the subset")
        return node

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "str":
            value = tok.text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            return lambda env: value
        if tok.text == "(":
            node = self.expr()
            self.take(")")
            return node
        if tok.text == "[":
            items: list[Node] = []
            while self.peek() != "]":
                items.append(self.expr())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            return lambda env: [item(env) for item in items]
        if tok.text in ("true", "false"):
            value_b = tok.text == "true"
            return lambda env: value_b
        if tok.text == "has":
            self.take("(")
            start = self.i
            target = self.member()
            self.take(")")
            if self.toks[self.i - 2].kind != "id" or self.toks[self.i - 3].text != ".":
                raise SyntaxError(f"has() needs a field selection, at token {start}")
            field, obj = self.toks[self.i - 2].text, self._without_last_field(start)
            del target
            return lambda env: _has(obj(env), field)
        if tok.kind == "id":
            name = tok.text
            return lambda env: _lookup(env, name)
        raise SyntaxError(f"unexpected {tok.text!r}")

    def _without_last_field(self, start: int) -> Node:
        """has(a.b.c): the object a.b, parsed again from the tokens before the last '.c'."""
        sub = _Parser.__new__(_Parser)
        sub.toks, sub.i = self.toks[start : self.i - 3], 0
        return sub.parse()


def _lookup(env: Env, name: str) -> Any:
    if name not in env:
        raise CelError(f"undeclared reference to {name!r}")
    return env[name]


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise CelError(f"no such overload: {v!r} is not a bool")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise CelError(f"no such overload: {v!r} is not a string")
    return v


def _field(obj: Any, name: str) -> Any:
    if not isinstance(obj, Mapping):
        raise CelError(f"no such field {name!r} on {obj!r}")
    if name not in obj:
        raise CelError(f"no such key: {name}")
    return obj[name]


def _has(obj: Any, name: str) -> bool:
    if not isinstance(obj, Mapping):
        raise CelError(f"has() on {obj!r}")
    return name in obj


def _index(obj: Any, key: Any) -> Any:
    if isinstance(obj, Mapping):
        if key not in obj:
            raise CelError(f"no such key: {key}")
        return obj[key]
    raise CelError(f"cannot index {obj!r}")


def _in(item: Any, container: Any) -> bool:
    if isinstance(container, (Mapping, list)):
        return item in container
    raise CelError(f"'in' on {container!r}")


def _bin(left: Node, right: Node, f: Callable[[Any, Any], Any]) -> Node:
    return lambda env: f(left(env), right(env))


def _logic(left: Node, right: Node, absorbing: bool) -> Node:
    """CEL's && and ||: an error on one side is ignored where the other side decides."""

    def run(env: Env) -> bool:
        try:
            first: bool | CelError = _bool(left(env))
        except CelError as e:
            first = e
        if first is absorbing:
            return absorbing
        second = _bool(right(env))
        if isinstance(first, CelError):
            if second is absorbing:
                return absorbing
            raise first
        return second

    return run


def _or(left: Node, right: Node) -> Node:
    return _logic(left, right, True)


def _and(left: Node, right: Node) -> Node:
    return _logic(left, right, False)


def _exists(obj: Node, var: str, pred: Node) -> Node:
    def run(env: Env) -> bool:
        items = obj(env)
        if isinstance(items, Mapping):  # a map's exists() ranges over its keys, as CEL's
            items = list(items)
        if not isinstance(items, list):
            raise CelError(f"exists() on {items!r}")
        return any(_bool(pred({**env, var: item})) for item in items)

    return run


def compile_cel(src: str) -> Node:
    return _Parser(src).parse()


class _Variables(Mapping[str, Any]):
    """``variables``: each evaluated once, when first used, as the API server does."""

    def __init__(self, exprs: Sequence[Mapping[str, str]], env: dict[str, Any]) -> None:
        self._nodes = {v["name"]: compile_cel(v["expression"]) for v in exprs}
        self._env, self._done = env, dict[str, Any]()

    def __getitem__(self, name: str) -> Any:
        if name not in self._done:
            self._done[name] = self._nodes[name](self._env)
        return self._done[name]

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __iter__(self) -> Any:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def admits(policy: Mapping[str, Any], activation: Mapping[str, Any]) -> bool:
    """Whether every validation of a ValidatingAdmissionPolicy holds for ``activation`` (object,
    oldObject, request, namespaceObject); an evaluation error raises CelError (failurePolicy Fail
    would refuse)."""
    env: dict[str, Any] = dict(activation)
    env["variables"] = _Variables(policy["spec"].get("variables", []), env)
    return all(_bool(compile_cel(v["expression"])(env)) for v in policy["spec"]["validations"])
