"""The command line's own coercion of option values (:mod:`infergap.cli.coercion`) gives what
Typer's pydantic adapters give: for every parameter of every command that it takes over, the
same value or the same error message, on valid and invalid values alike."""

from __future__ import annotations

import pytest
import typer
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param
from typer.core import TyperGroup

from infergap.cli import app
from infergap.cli.coercion import PlainRuntimeParam, install, kind_of


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


def _params():
    root = typer.main.get_command(app)
    for path, cmd in _commands(root):
        for p in cmd.params:
            if kind_of(getattr(p, "type_descriptor", None)) is not None:
                yield " ".join(path) + ":" + p.name, cmd, p


PARAMS = list(_params())


def _outcome(runtime, value, param, ctx):
    try:
        return "value", runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as e:
        return "error", e.message


def _samples(kind: str, leaf, tmp_path) -> list:
    (tmp_path / "f.txt").write_text("x")
    common = ["", "x", "8", "-1", "2.5", "nan", "http://127.0.0.1:8000", "text", "P1", "yes", "\x1b[31mred"]
    if kind == "choice":
        return common + [c.value for c in leaf] + [str(c.value).upper() for c in leaf] + [list(leaf)[0]]
    if kind == "path":
        return common + [str(tmp_path / "f.txt"), str(tmp_path), str(tmp_path / "absent"), "-"]
    return common


def test_every_plain_kind_is_covered():
    """The audit's parameters are all taken over (so an audit builds no adapter), and there are
    parameters of each kind to compare."""
    kinds = {kind_of(p.type_descriptor)[0] for _n, _c, p in PARAMS}
    assert kinds == {"parser", "choice", "bool", "str", "path"}, kinds
    root = typer.main.get_command(app)
    audit = root.commands["audit"]
    assert all(kind_of(p.type_descriptor) is not None for p in audit.params), [p.name for p in audit.params]
    assert isinstance(root, TyperGroup) and all(isinstance(p._runtime_param, PlainRuntimeParam) for p in audit.params)
    assert install(root) == 0  # installed once, when the group was made


@pytest.mark.parametrize("name,cmd,param", PARAMS, ids=[n for n, _c, _p in PARAMS])
def test_same_value_or_message_as_typer(name, cmd, param, tmp_path):
    kind, leaf = kind_of(param.type_descriptor)
    ours = param._runtime_param
    assert isinstance(ours, PlainRuntimeParam)
    theirs = build_runtime_param(param.type_descriptor)
    ctx = cmd.make_context(cmd.name, [], resilient_parsing=True)
    samples = _samples(kind, leaf, tmp_path)
    if param.multiple or param.nargs == -1:
        samples = [(s,) for s in samples] + [tuple(samples[:3]), (), None]
    elif kind == "bool":
        samples = [True, False, None, "true", "0", "maybe"]
    else:
        samples = samples + [None]
    for v in samples:
        assert _outcome(ours, v, param, ctx) == _outcome(theirs, v, param, ctx), (name, v)
