"""Every YAML file infergap reads goes through here: the packaged catalogs (``data/*.yaml``,
``data/messages/*.yaml``) and any YAML file named by an option (a lever catalog given to
``plan --catalog``, a signature catalog given by path).

Parsing uses PyYAML's C loader (``yaml.CSafeLoader``, libyaml) when PyYAML was built with it,
else the pure-Python ``yaml.SafeLoader`` (same results; measured on the 2-core CI machine the
pure one takes 0.28 s for ``checks.yaml`` and 0.58 s for ``signatures.yaml``, the C one 0.04 and
0.08 s). Only YAML's safe types are built (no Python objects, no tags that run code).

Before anything is built, the parsed node graph is measured against :class:`Limits` (one walk,
each node once, so a document whose aliases would expand to 10^9 nodes costs the same as its
800 bytes):

- ``max_aliases``: alias references (``*name``). A file named by an option may hold none
  (:data:`UNTRUSTED`): a lever or signature catalog has no need of them, and an alias is how an
  800-byte document expands to billions of nodes in whatever walks it next (validation, a report).
- ``max_nodes``: nodes of the document with every alias expanded, the size any consumer sees.
- ``max_depth``: nesting, aliases expanded. The catalogs nest at most 8 levels; 64 matches
  :data:`infergap.guard.MAX_JSON_DEPTH` and keeps every recursive walk far from Python's recursion
  limit (libyaml itself stops at 1000; the pure loader would raise ``RecursionError`` near 1000).
- ``max_bytes``: size of the file before parsing.

A file over a limit, not UTF-8, or not valid YAML raises :class:`infergap.errors.UserError` with
one line naming the file and the problem.

Packaged files are parsed once per change: :func:`packaged` keeps the parsed data (``marshal``,
loaded in well under a millisecond) in the user cache directory (``$INFERGAP_CACHE_DIR``, else
platformdirs' ``user_cache_dir("infergap")/data``; an empty ``INFERGAP_CACHE_DIR`` turns the cache
off) under the SHA-256 of the file's bytes, so editing the YAML is seen by the next run. The cache
is an optimisation only: a directory that cannot be written, an entry that is damaged or owned by
another user is ignored and the file is parsed again.

>>> loads("a: [1, 2, {b: c}]", "example.yaml")
{'a': [1, 2, {'b': 'c'}]}
>>> loads("a: &x [1]\\nb: *x", "example.yaml")
Traceback (most recent call last):
infergap.errors.UserError: example.yaml: YAML aliases are not accepted in this file (an alias of the anchor at line 1, column 4); refused
>>> loads("a: &x [1]\\nb: *x", "example.yaml", limits=SHIPPED)
{'a': [1], 'b': [1]}
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from infergap.errors import UserError

#: The loader used: libyaml's when PyYAML has it.
LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Limits:
    """Caps checked before a YAML document is built (see the module docstring)."""

    max_bytes: int
    max_depth: int
    max_nodes: int
    max_aliases: int


#: Files named by an option or otherwise from outside: no aliases; 16 MiB and 10^6 nodes are
#: about 20 times the largest catalog shipped.
UNTRUSTED = Limits(max_bytes=16 << 20, max_depth=64, max_nodes=1_000_000, max_aliases=0)

#: The packaged catalogs: aliases allowed (``signatures.yaml`` names one source for many Xid rows),
#: the expansion still capped.
SHIPPED = Limits(max_bytes=64 << 20, max_depth=64, max_nodes=4_000_000, max_aliases=10_000)

#: Bumped whenever what this module returns for a given file could change (the cache key).
CACHE_FORMAT = b"infergap-data/1"


class _Refused(Exception):
    """A limit was exceeded; the message is the rest of the user's line after the file name."""


def _kids(node: Any) -> list[Any]:
    v = node.value
    if isinstance(node, yaml.MappingNode):
        return [x for pair in v for x in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(v)
    return []


def _at(node: Any) -> str:
    m = getattr(node, "start_mark", None)
    return f"line {m.line + 1}, column {m.column + 1}" if m is not None else "?"


def _alias(k: int, node: Any, d: int, n: int, height: dict[int, int], limits: Limits) -> None:
    """Check the ``n``-th alias reference, to ``node`` at depth ``d`` (an alias is the same node
    object as its anchor, so the place named is the anchor's)."""
    if n > limits.max_aliases:
        raise _Refused(f"YAML aliases are not accepted in this file (an alias of the anchor at {_at(node)})"
                       if not limits.max_aliases else f"more than {limits.max_aliases} YAML aliases")
    if d - 1 + height[k] > limits.max_depth:
        raise _Refused(f"nested deeper than {limits.max_depth} levels once its aliases are expanded "
                       f"(the anchor at {_at(node)})")


def _measure(root: Any, limits: Limits) -> None:
    """Walk the node graph once: alias references, expanded node count and expanded depth.

    Each node object is visited once (an alias is the same node object as its anchor); sizes and
    heights are memoised, so the cost is linear in the document's text even when the expansion is
    exponential. Raises :class:`_Refused` at the first limit exceeded, or for an alias inside its
    own anchor (a recursive document).
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    open_: set[int] = set()
    aliases = 0
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, d, post = stack.pop()
        k = id(node)
        if post:
            kids = _kids(node)
            size[k] = 1 + sum(size[id(c)] for c in kids)
            height[k] = 1 + max((height[id(c)] for c in kids), default=0)
            open_.discard(k)
            if size[k] > limits.max_nodes:
                raise _Refused(f"more than {limits.max_nodes} YAML nodes once its aliases are expanded "
                               f"(at the node at {_at(node)})")
        elif k in open_:
            raise _Refused(f"a YAML alias inside its own anchor (the anchor at {_at(node)}): a recursive document")
        elif k in size:  # seen before: this occurrence is an alias
            aliases += 1
            _alias(k, node, d, aliases, height, limits)
        elif d > limits.max_depth:
            raise _Refused(f"nested deeper than {limits.max_depth} levels (at {_at(node)})")
        else:
            open_.add(k)
            stack.append((node, d, True))
            stack.extend((c, d + 1, False) for c in reversed(_kids(node)))


class _PureDepthLoader(yaml.SafeLoader):
    """The pure loader with its recursive composer stopped at a depth before Python's recursion
    limit would be (the C composer is bounded by libyaml's own limit of 1000)."""

    max_depth = 64
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - PyYAML's hook
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise _Refused(f"nested deeper than {self.max_depth} levels (at {_at(self.peek_event())})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _yaml_problem(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        m = e.problem_mark
        at = f" at line {m.line + 1}, column {m.column + 1}" if m is not None else ""
        return f"{e.context}: {e.problem}{at}" if e.context else f"{e.problem}{at}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _text(data: str | bytes, source: str, limits: Limits) -> str:
    if len(data) > limits.max_bytes:
        raise UserError(f"{source}: larger than {limits.max_bytes >> 20} MiB; not read as YAML")
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise UserError(f"{source}: not text (not UTF-8); expected a YAML file") from None
    return data


def loads(data: str | bytes, source: str, *, limits: Limits = UNTRUSTED) -> Any:
    """The YAML document in ``data`` (text, or UTF-8 bytes) as plain Python data: dict, list,
    str, int, float, bool, None (and ``datetime.date``/``datetime`` for unquoted timestamps).

    ``source`` names the input in errors. Raises :class:`infergap.errors.UserError`, one line
    starting with ``source``, for data over ``limits`` (:class:`Limits`), not UTF-8, not valid
    YAML, or holding more than one document. An empty document is ``None``.
    """
    text = _text(data, source, limits)
    loader = (LOADER if LOADER is not yaml.SafeLoader else type("_L", (_PureDepthLoader,), {"max_depth": limits.max_depth}))(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, limits)
        return loader.construct_document(node)
    except _Refused as e:
        raise UserError(f"{source}: {e}; refused") from None
    except yaml.YAMLError as e:
        raise UserError(f"{source}: not valid YAML ({_yaml_problem(e)})") from None
    except (ValueError, OverflowError, RecursionError) as e:  # a timestamp like 2025-13-45, an int too long
        raise UserError(f"{source}: not valid YAML ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    finally:
        loader.dispose()


def read(path: str | os.PathLike[str], what: str | None = None, *, limits: Limits = UNTRUSTED) -> Any:
    """The YAML document of the file at ``path`` (:func:`loads`), read with ``limits.max_bytes``
    as a cap. ``what`` names it in errors (default: the path). Raises
    :class:`infergap.errors.UserError` for a file that cannot be read, as :func:`loads` does."""
    where = what or str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(limits.max_bytes + 1)
    except OSError as e:
        raise UserError(f"{where}: cannot read ({e.strerror or e})") from None
    return loads(raw, where, limits=limits)


# -- packaged files, parsed once per change ----------------------------------------------------

_MISS = object()


def cache_dir() -> Path | None:
    """Where parsed packaged files are kept: ``$INFERGAP_CACHE_DIR`` (empty: no cache), else
    the user cache directory of platformdirs (``~/.cache/infergap`` on Linux) + ``/data``."""
    env = os.environ.get("INFERGAP_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("infergap", appauthor=False)) / "data"


def _key(raw: bytes) -> str:
    import sys

    h = hashlib.sha256(CACHE_FORMAT)
    h.update(f"|{marshal.version}|{sys.version_info[0]}.{sys.version_info[1]}|{LOADER.__name__}|".encode())
    h.update(raw)
    return h.hexdigest()


def _entry(name: str, key: str) -> Path | None:
    d = cache_dir()
    return d / f"{name.replace('/', '.')}.{key[:32]}.marshal" if d is not None else None


def _cache_get(path: Path, key: str) -> Any:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return _MISS
            blob = f.read()
        tag, k, data = marshal.loads(blob)
    except (OSError, EOFError, ValueError, TypeError):
        return _MISS
    return data if tag == CACHE_FORMAT and k == key else _MISS


def _cache_put(path: Path, key: str, data: Any) -> None:
    """Store ``data`` atomically; stale entries of the same file removed. Never raises."""
    try:
        blob = marshal.dumps((CACHE_FORMAT, key, data))
    except ValueError:  # a type marshal cannot store (a timestamp): parse each run instead
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.parent.stat().st_uid != os.getuid():
            return
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".marshal")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        stem = path.name.rsplit(".", 2)[0]
        for old in path.parent.glob(f"{stem}.*.marshal"):
            if old.name != path.name and old.name.count(".") == path.name.count("."):
                old.unlink(missing_ok=True)
    except OSError:
        return


def packaged_bytes(name: str) -> bytes:
    """The bytes of the packaged data file ``data/<name>`` (``name`` may hold ``/``)."""
    ref = resources.files("infergap").joinpath("data", *name.split("/"))
    return ref.read_bytes()


def packaged(name: str) -> Any:
    """The data of the packaged YAML file ``data/<name>`` (e.g. ``checks.yaml``,
    ``messages/nccl.yaml``): from the cache when the file is unchanged, else parsed with
    :data:`SHIPPED` limits and cached. Each call returns a fresh copy (callers may change it).

    Raises :class:`infergap.errors.UserError` naming ``infergap/data/<name>`` for a damaged
    install (missing file, invalid YAML, over the limits).
    """
    source = f"infergap/data/{name}"
    try:
        raw = packaged_bytes(name)
    except OSError as e:
        raise UserError(f"{source}: cannot read ({e.strerror or e}); the installation is damaged") from None
    key = _key(raw)
    entry = _entry(name, key)
    if entry is not None:
        hit = _cache_get(entry, key)
        if hit is not _MISS:
            return hit
    data = loads(raw, source, limits=SHIPPED)
    if entry is not None:
        _cache_put(entry, key, data)
    return data
