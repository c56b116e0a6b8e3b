"""Option values coerced without building a pydantic ``TypeAdapter`` per parameter.

Typer (0.2x, ``typer._coercion.build_runtime_param``) turns every parameter's value into its
annotated type through a pydantic ``TypeAdapter`` built on first use, for every parameter of the
command run, given or not. Importing that layer (``typer._adapters``: ``pydantic.types``,
``annotated_types``) and building the adapters costs about 55 ms of CPU per run on the 2-core CI
machine (``benchmarks/start_speed.py``), a sixth of the time a snapshot audit may take over the
floor. The parameters of the kinds below are coerced here instead, by Typer's own functions
(:func:`typer._param_types.coerce_cli_choice`, :func:`typer._param_types.coerce_cli_path`) in
the order Typer's ``build_leaf_adapter`` tries them, with its error messages; any other kind (a
number, a custom ``parser=``, a file, a tuple) keeps Typer's adapter.

Kinds coerced here (each also as ``list[...]``): an :class:`~enum.Enum` (a choice), ``str``, a
:class:`~pathlib.Path` (with Typer's ``exists``/``file_okay``/``dir_okay``/``readable``/
``writable``/``resolve_path`` checks). ``tests/cli/test_coercion.py`` holds every such parameter
of every command to Typer's own result and error message.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:  # Typer >= 0.2x: coercion through pydantic adapters, with these helpers
    from typer._click.exceptions import BadParameter
    from typer._click.utils import _escape_control_characters
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass, routes_to_path
except ImportError:  # pragma: no cover - an older Typer coerces through click types: nothing to replace
    RuntimeParam = None  # type: ignore[assignment,misc]


def _leaf_kind(annotation: Any, info: Any) -> str | None:
    """``parser``, ``choice``, ``bool``, ``str`` or ``path`` when a value of ``annotation`` is
    coerced here, else None; checked in the order of Typer's ``build_leaf_adapter`` (a parser
    first, then enum, bool, str, path)."""
    if getattr(info, "parser", None) is not None:
        return "parser"
    if lenient_issubclass(annotation, Enum):
        return "choice"
    if annotation is bool:
        return "bool"
    if annotation is str:
        return "str"
    if lenient_issubclass(annotation, Path) and routes_to_path(annotation, info):
        return "path"
    return None


def kind_of(descriptor: Any) -> tuple[str, Any] | None:
    """(leaf kind, leaf annotation) of a Typer ``TypeDescriptor`` coerced here, or None."""
    if descriptor is None or descriptor.file_annotation is not None:
        return None
    ann = descriptor.annotation
    if get_origin(ann) is list:
        args = get_args(ann)
        if len(args) != 1:
            return None
        ann = args[0]
    kind = _leaf_kind(ann, descriptor.parameter_info)
    return None if kind is None else (kind, ann)


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):  # type: ignore[misc,valid-type]
        """Typer's runtime coercion of one parameter of a kind above, without pydantic."""

        kind: str = "str"
        leaf: Any = str

        def _leaf(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            if self.kind == "parser":
                try:
                    return info.parser(value)
                except ValueError as e:  # pydantic's wording of a validator's ValueError, as Typer shows it
                    raise BadParameter(_escape_control_characters(f"Value error, {e}"), ctx=ctx, param=param) from None
                except AssertionError as e:
                    raise BadParameter(_escape_control_characters(f"Assertion failed, {e}"), ctx=ctx, param=param) from None
            if self.kind == "bool":  # a flag is a bool already; a string (from the environment) gets Typer's own rules
                return value if isinstance(value, bool) else build_runtime_param(
                    TypeDescriptor(annotation=bool, parameter_info=info, file_annotation=None))._coerce_value(value, param, ctx)
            if self.kind == "str":
                return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if self.kind == "choice":
                try:
                    return coerce_cli_choice(value, choices=list(self.leaf), case_sensitive=info.case_sensitive, ctx=ctx)
                except ValueError as e:  # pydantic's wording of a validator's ValueError, as Typer shows it
                    raise BadParameter(_escape_control_characters(f"Value error, {e}"), ctx=ctx, param=param) from None
            path_type = info.path_type or self.leaf
            if isinstance(value, str) and lenient_issubclass(path_type, Path):
                value = path_type(value)  # what pydantic's Path validation makes of a command-line string
            return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if get_origin(self.annotation) is list:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self._leaf(v, param, ctx) for v in items]
            return self._leaf(value, param, ctx)


def install_param(p: Any) -> bool:
    """Give Typer parameter ``p`` its coercion here when it is of a kind above and Typer has not
    built its own yet; returns whether it got one."""
    desc = getattr(p, "type_descriptor", None)
    if RuntimeParam is None or getattr(p, "_runtime_param", True) is not None:
        return False
    found = kind_of(desc)
    if found is not None:
        p._runtime_param = PlainRuntimeParam(parameter_info=desc.parameter_info, annotation=desc.annotation,
                                             kind=found[0], leaf=found[1])
    return found is not None


def install(cmd: Any) -> int:
    """:func:`install_param` for every parameter of ``cmd`` and of its subcommands (``--help``,
    made per context, is given it where it is made). Returns how many parameters got one."""
    n = sum(install_param(p) for p in getattr(cmd, "params", []))
    for sub in (getattr(cmd, "commands", None) or {}).values():
        n += install(sub)
    return n
