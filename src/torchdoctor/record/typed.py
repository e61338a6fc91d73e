"""One typed read of a recorded section, and its write back: the frozen dataclasses of
``record/`` read a ``run.json`` (or ``report.json``) section from its fields' annotations, with
the tolerant coercions every record read applies, instead of each hand-writing a ``from_dict``.

``read(cls, d)`` builds ``cls`` field by field from ``d[field name]``: a missing or malformed
value reads as the field's default (a field without one: its type's zero), never an exception.
An ``int`` field takes a finite number, truncated; a ``float`` a number, never a bool; a ``str``
anything but None or ``""``; an optional dict a dict, an optional section a non-empty one; rows
only dicts. A field named ``raw`` gets ``d`` itself, so keys without a field are kept. A field
reads another key (``"exit.status"``: ``status`` in ``exit``) with ``field(metadata=key(...))``,
or needs its own coercion with ``metadata=reads(fn)``.

``write(obj)`` is the way back: ``raw``'s keys, in their order, with the typed values where they
differ from what was recorded (so a well-formed section comes back as it was, ``1`` staying
``1``), and the fields ``raw`` lacks unless they hold their default (a reader gets the default
back from a missing key). A field that reads a key another field is named after
(``op_summary`` reads ``ops``) is a view of it, not written.

``recorded(value)`` is the one writer of what the capture side hands over: its watchers build
these rows in code and ``record/write.py`` writes them into ``run.json`` as recorded, every
field under its key in declaration order, default or not, except a field marked
``omitted_at_default()`` (a key the record leaves out when it holds nothing: an optimizer's
``call`` when library code built it; or, ``omitted_at_default("kwargs")``, while another field
does: a call's ``args`` when its source could not be read), and a field marked
``null_at_default()``, written as null while it holds its default (a call whose user line was
not found: ``"site": null``, which a reader reads back as the default).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from torchdoctor.record.values import as_count, as_dict, as_list, as_number, as_rows

T = TypeVar("T")
Coerce = Callable[[Any, Any], Any]
"""``(recorded value, the field's default) -> the field's value``."""


def key(path: str) -> dict[str, Any]:
    """Field metadata: read (and write) ``path`` instead of the field's name; dots go down."""
    return {"key": path}


def reads(coerce: Coerce) -> dict[str, Any]:
    """Field metadata: read the field with ``coerce(value, default)``."""
    return {"read": coerce}


def omitted_at_default(following: str = "") -> dict[str, Any]:
    """Field metadata: ``recorded`` leaves the key out while the field (or the field named
    ``following``: keys written together or not at all) holds its default."""
    return {"omit": following or True}


def null_at_default() -> dict[str, Any]:
    """Field metadata: ``recorded`` writes null (JSON's ``null``) while the field holds its
    default; a read of null gives the default back."""
    return {"null": True}


class Row:
    """A typed row or section read by ``read``: ``from_dict`` and ``to_dict`` both ways."""

    @classmethod
    def from_dict(cls: type[T], d: Any) -> T:
        return read(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return write(self)


def read(cls: type[T], d: Any) -> T:
    """``cls`` (a dataclass) read from the dict ``d`` (anything else reads as ``{}``)."""
    d = as_dict(d)
    values = {}
    for name, outer, last, coerce, default, factory in _readers(cls):
        if name == "raw":
            values["raw"] = d
            continue
        src = d
        for part in outer:
            src = as_dict(src.get(part))
        values[name] = coerce(src.get(last), factory() if factory else default)
    return cls(**values)


def write(obj: Any) -> dict[str, Any]:
    """The dict ``obj`` (a dataclass read by ``read`` or built in code) is written as."""
    raw = getattr(obj, "raw", None) or {}
    out = dict(raw)
    for f, path in _written(type(obj)):
        value = plain(getattr(obj, f.name))
        if path.split(".")[0] in raw:
            if _lookup(raw, path) != value:
                _place(out, path, value)
        elif value != plain(_default(f)):
            _place(out, path, value)
    return out


def recorded(value: Any) -> Any:
    """``value`` as ``run.json`` records it: a row built in code (and every row inside it) field
    by field in declaration order, each under its key, but a field ``omitted_at_default`` that
    holds its default and a view of another field's key; then ``raw``'s other keys, if any.
    Dicts, lists and tuples are written item by item, as ``plain`` writes them."""
    return plain(value, _recorded_row)


def _recorded_row(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    named = {f.name: f for f in dataclasses.fields(obj)}
    for f, path in _written(type(obj)):
        omit = f.metadata.get("omit")
        by = named[omit] if isinstance(omit, str) else f
        value = recorded(getattr(obj, f.name))
        if omit and recorded(getattr(obj, by.name)) == recorded(_default(by)):
            continue
        if f.metadata.get("null") and value == recorded(_default(f)):
            value = None
        _place(out, path, value)
    for k, v in (getattr(obj, "raw", None) or {}).items():
        out.setdefault(k, v)
    return out


def plain(value: Any, row: Callable[[Any], dict[str, Any]] | None = None) -> Any:
    """``value`` as JSON data: a dataclass as ``row(value)`` (default: its ``to_dict``, or
    ``write``), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if row is not None:
            return row(value)
        to_dict = getattr(value, "to_dict", None)
        return to_dict() if callable(to_dict) else write(value)
    if isinstance(value, list | tuple):
        return [plain(v, row) for v in value]
    if isinstance(value, dict):
        return {k: plain(v, row) for k, v in value.items()}
    return value


def _lookup(d: dict[str, Any], path: str) -> Any:
    *outer, last = path.split(".")
    for part in outer:
        d = as_dict(d.get(part))
    return d.get(last)


def _place(out: dict[str, Any], path: str, value: Any) -> None:
    *outer, last = path.split(".")
    for part in outer:
        out[part] = out = dict(as_dict(out.get(part)))
    out[last] = value


def _default(f: dataclasses.Field[Any], hint: Any = None) -> Any:
    """The field's default; a field without one reads as its type's zero (``""``, ``0``...)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _ZERO.get(hint)


_ZERO: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False}


_Reader = tuple[str, tuple[str, ...], str, Coerce, Any, Callable[[], Any] | None]
"""A field's name, the keys down to its own, its key, its coercion, its default or the factory
that makes it."""
_READERS: dict[type, tuple[_Reader, ...]] = {}


def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], str], ...]:
    """Each field of the dataclass ``cls`` and the key it is read from."""
    return tuple((f, f.metadata.get("key", f.name)) for f in dataclasses.fields(cls))


def _written(cls: type) -> list[tuple[dataclasses.Field[Any], str]]:
    """The fields of ``cls`` a write writes, with their keys: not ``raw``, and not a second,
    typed view of a key another field is named after (``op_summary`` of ``ops``)."""
    plan = _fields(cls)
    names = {f.name for f, _ in plan}
    heads = [path.split(".")[0] for _, path in plan]
    return [
        (f, path)
        for (f, path), head in zip(plan, heads, strict=True)
        if f.name != "raw" and (head == f.name or head not in names)
    ]


def _readers(cls: type) -> tuple[_Reader, ...]:
    """How ``read`` reads each field of ``cls`` (worked out once per class)."""
    if cls not in _READERS:
        hints = typing.get_type_hints(cls)
        plan: list[_Reader] = []
        for f, path in _fields(cls):
            *outer, last = path.split(".")
            coerce = f.metadata.get("read") or _coercion(hints[f.name])
            factory = f.default_factory
            if factory is dataclasses.MISSING:
                plan.append((f.name, tuple(outer), last, coerce, _default(f, hints[f.name]), None))
            else:
                plan.append((f.name, tuple(outer), last, coerce, None, factory))
        _READERS[cls] = tuple(plan)
    return _READERS[cls]


def _float(v: Any, dflt: Any) -> Any:
    got = as_number(v)
    return dflt if got is None else got


def _pair(v: Any) -> tuple[str, float] | None:
    ok = isinstance(v, list | tuple) and len(v) == 2 and isinstance(v[0], str)
    return (v[0], _float(v[1], 0.0)) if ok else None


_SCALARS: dict[Any, Coerce] = {
    int: as_count,
    float: _float,
    bool: lambda v, dflt: dflt if v is None else bool(v),
    str: lambda v, dflt: dflt if v is None or v == "" else str(v),
    Any: lambda v, dflt: dflt if v is None else v,
    object: lambda v, dflt: dflt if v is None else v,
}
_ITEMS: dict[Any, Callable[[Any], Any]] = {
    # an item of a tuple, list or dict: its value, or None to leave it out
    str: str,
    float: lambda v: as_number(v),
    int: lambda v: as_count(v, None),
    tuple[str, float]: _pair,
    tuple[str, str]: lambda v: (str(v[0]), str(v[1])) if _pair(v) else None,
}


def _coercion(tp: Any) -> Coerce:
    """How a value is read into a field annotated ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner, *more = (a for a in args if a is not type(None))
        if more:
            raise TypeError(f"no recorded-value coercion for the union {tp!r}")
        if inner is bool:
            return lambda v, dflt: v if isinstance(v, bool) else dflt
        base = _coercion(inner)
        if dataclasses.is_dataclass(inner):
            return lambda v, dflt: base(v, dflt) if isinstance(v, dict) and v else dflt
        if typing.get_origin(inner) is dict:
            return lambda v, dflt: base(v, dflt) if isinstance(v, dict) else dflt
        if typing.get_origin(inner) is list:
            return lambda v, dflt: base(v, dflt) if isinstance(v, list) else dflt
        return lambda v, dflt: dflt if v is None else base(v, dflt)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        from_dict = getattr(tp, "from_dict", None) or functools.partial(read, tp)
        return lambda v, dflt: from_dict(as_dict(v))
    if origin is dict and args[1] is Any:
        return lambda v, dflt: as_dict(v)
    if origin is dict and isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
        entry = _coercion(args[1])
        return lambda v, dflt: {
            str(k): entry(x, None) for k, x in as_dict(v).items() if isinstance(x, dict)
        }
    if origin is dict and args[0] is str:
        item = _item(args[1])
        return lambda v, dflt: {
            str(k): got for k, x in as_dict(v).items() if (got := item(x)) is not None
        }
    if origin in (list, tuple):
        of = args[0]
        if isinstance(of, type) and dataclasses.is_dataclass(of):
            row = _coercion(of)
            return lambda v, dflt: origin(row(r, None) for r in as_rows(v))
        if typing.get_origin(of) is dict:
            return lambda v, dflt: as_rows(v) if origin is list else tuple(as_rows(v))
        if of is Any:
            return lambda v, dflt: origin(as_list(v))
        item = _item(of)
        return lambda v, dflt: origin(x for x in map(item, as_list(v)) if x is not None)
    raise TypeError(f"no recorded-value coercion for the annotation {tp!r}")


def _item(tp: Any) -> Callable[[Any], Any]:
    if tp not in _ITEMS:
        raise TypeError(f"no recorded-value coercion for items of {tp!r}")
    return _ITEMS[tp]
