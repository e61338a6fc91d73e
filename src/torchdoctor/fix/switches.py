"""The script's own settings: a value its code reads from its command line or its config, so a
remedy can name the switch (``--compile=True``) instead of patching the code around it.

Four shapes are read, each from the code (never by running it):

- **configurator**: module-level globals, then ``exec(open('configurator.py').read())``, a
  file that walks ``sys.argv`` and sets ``globals()[key]`` from ``--key=value`` (nanoGPT);
- **argparse**: ``args.<dest>`` where ``args = parser.parse_args()`` and the parser has an
  ``add_argument`` for that dest (``--compile`` with ``store_true``, ``--workers 4``);
- **global**: a module-level ``NAME = literal`` that nothing on the command line sets;
- **dict**: ``config["key"]`` / ``config.get("key")`` of a module-level ``config = {...}``.

The first two are switches (the fix is a command line: ``Switch``); the last two are a
one-literal edit of the default where it is written (``edit_default``).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import libcst as cst

from torchdoctor.fix.cst_tools import NOT_LITERAL, Parsed, full_name, literal
from torchdoctor.fix.model import Refusal, Rewrite, Switch

Kind = Literal["configurator", "argparse", "global", "dict"]


@dataclass(frozen=True)
class Setting:
    """One setting of the script, where its default is written."""

    name: str
    """The key (``compile``; an argparse dest; a dict key)."""
    kind: Kind
    file: str
    line: int
    """Line of the default: the assignment, the ``add_argument`` call, the dict entry."""
    default: Any
    """The default as written (``NOT_LITERAL`` when computed)."""
    options: tuple[str, ...] = ()
    """argparse: the option strings (``-j``, ``--workers``)."""
    action: str = "store"
    """argparse: ``store``, ``store_true``, ``store_false``, ``BooleanOptionalAction``."""
    reader: str = ""
    """The configurator's file (``configurator.py``)."""
    spelled: str = ""
    """How the code reads it (``compile``, ``args.compile``, ``config["compile"]``)."""


@dataclass(frozen=True)
class Guard:
    """The condition a statement runs under, read as a setting: runs when it equals ``wanted``."""

    setting: Setting | None
    wanted: bool
    code: str
    """The condition as written."""


# -- reading a setting from an expression -----------------------------------------------------
def setting_of(p: Parsed, file: str, expr: cst.BaseExpression) -> Setting | None:
    """The setting ``expr`` reads, or None when it reads something else."""
    if isinstance(expr, cst.Name):
        return _global(p, file, expr)
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        return _argparse(p, file, expr.value.value, expr.attr.value)
    key = _dict_key(expr)
    if key is not None:
        return _dict_entry(p, file, *key)
    return None


def module_assign(p: Parsed, name: str) -> tuple[cst.SimpleStatementLine, cst.BaseExpression]:
    """The last module-level ``name = value`` statement and its value (KeyError when none)."""
    found: tuple[cst.SimpleStatementLine, cst.BaseExpression] | None = None
    for stmt in p.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
            ):
                found = (stmt, small.value)
            if (
                isinstance(small, cst.AnnAssign)
                and isinstance(small.target, cst.Name)
                and small.target.value == name
                and small.value is not None
            ):
                found = (stmt, small.value)
    if found is None:
        raise KeyError(name)
    return found


def _local_name(p: Parsed, node: cst.CSTNode, name: str) -> bool:
    """``name`` is a parameter of a function around ``node`` (not the module's global)."""
    for fn in p.ancestors(node):
        if isinstance(fn, cst.FunctionDef):
            params = fn.params
            every = [*params.posonly_params, *params.params, *params.kwonly_params]
            if any(a.name.value == name for a in every):
                return True
    return False


def _global(p: Parsed, file: str, expr: cst.Name) -> Setting | None:
    name = expr.value
    if _local_name(p, expr, name):
        return None
    try:
        stmt, value = module_assign(p, name)
    except KeyError:
        return None
    reader = configurator(p, file)
    line = p.line(stmt)
    kind: Kind = "global"
    if reader is not None and line < reader[1]:
        kind = "configurator"
    return Setting(
        name,
        kind,
        file,
        line,
        literal(value),
        reader=reader[0] if reader and kind == "configurator" else "",
        spelled=name,
    )


def configurator(p: Parsed, file: str) -> tuple[str, int] | None:
    """``(file name, line)`` of a module-level ``exec(open(NAME).read())`` whose file sets
    globals from ``sys.argv`` (nanoGPT's configurator.py), else None."""
    for stmt in p.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            call = small.value if isinstance(small, cst.Expr) else None
            if not (isinstance(call, cst.Call) and full_name(call.func) == "exec" and call.args):
                continue
            name = _opened_file(call.args[0].value)
            if name is None:
                continue
            path = _beside(file, name)
            if path and _sets_globals_from_argv(path):
                return name, p.line(stmt)
    return None


def _opened_file(expr: cst.BaseExpression) -> str | None:
    """``'configurator.py'`` for ``open('configurator.py').read()``."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)):
        return None
    inner = expr.func.value
    if isinstance(inner, cst.Call) and full_name(inner.func) == "open" and inner.args:
        name = literal(inner.args[0].value)
        return name if isinstance(name, str) else None
    return None


def _beside(file: str, name: str) -> str | None:
    for base in (os.path.dirname(file), os.getcwd()):
        path = os.path.join(base, name)
        if os.path.isfile(path):
            return path
    return None


def _sets_globals_from_argv(path: str) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return False
    return "sys.argv" in text and "globals()" in text


def _dict_key(expr: cst.BaseExpression) -> tuple[str, str] | None:
    """``("config", "compile")`` for ``config["compile"]`` or ``config.get("compile", ...)``."""
    if (
        isinstance(expr, cst.Subscript)
        and isinstance(expr.value, cst.Name)
        and len(expr.slice) == 1
        and isinstance(expr.slice[0].slice, cst.Index)
    ):
        key = literal(expr.slice[0].slice.value)
        if isinstance(key, str):
            return expr.value.value, key
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "get"
        and isinstance(expr.func.value, cst.Name)
        and expr.args
    ):
        key = literal(expr.args[0].value)
        if isinstance(key, str):
            return expr.func.value.value, key
    return None


def _dict_entry(p: Parsed, file: str, var: str, key: str) -> Setting | None:
    try:
        _, value = module_assign(p, var)
    except KeyError:
        return None
    if not isinstance(value, cst.Dict):
        return None
    for el in value.elements:
        if isinstance(el, cst.DictElement) and literal(el.key) == key:
            return Setting(
                key, "dict", file, p.line(el), literal(el.value), spelled=f'{var}["{key}"]'
            )
    return None


def _argparse(p: Parsed, file: str, var: str, attr: str) -> Setting | None:
    """``args.attr`` where ``args = parser.parse_args(...)`` and ``parser`` adds it."""
    parsers = set()
    for a in p.all(cst.Assign):
        v = a.value
        if (
            isinstance(v, cst.Call)
            and isinstance(v.func, cst.Attribute)
            and v.func.attr.value in ("parse_args", "parse_known_args")
            and any(isinstance(t.target, cst.Name) and t.target.value == var for t in a.targets)
        ):
            parsers.add(full_name(v.func.value))
    if not parsers:
        return None
    for call in p.all(cst.Call):
        f = call.func
        if not (isinstance(f, cst.Attribute) and f.attr.value == "add_argument"):
            continue
        options = tuple(o for o in (literal(a.value) for a in call.args if a.keyword is None))
        if not all(isinstance(o, str) and o.startswith("-") for o in options) or not options:
            continue
        kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if _dest(options, kw) != attr:
            continue
        action = _action(kw.get("action"))
        if action is None:
            return None
        default = {"store_true": False, "store_false": True}.get(action)
        if "default" in kw:
            default = literal(kw["default"])
        return Setting(
            attr,
            "argparse",
            file,
            p.line(call),
            default,
            options=options,
            action=action,
            spelled=f"{var}.{attr}",
        )
    return None


def _dest(options: Sequence[str], kw: dict[str, cst.BaseExpression]) -> str:
    if "dest" in kw:
        d = literal(kw["dest"])
        return d if isinstance(d, str) else ""
    longs = [o for o in options if o.startswith("--")]
    return (longs or list(options))[0].lstrip("-").replace("-", "_")


def _action(node: cst.BaseExpression | None) -> str | None:
    """``store``/``store_true``/``store_false``/``BooleanOptionalAction``; None for another."""
    if node is None:
        return "store"
    if full_name(node).endswith("BooleanOptionalAction"):
        return "BooleanOptionalAction"
    v = literal(node)
    return v if v in ("store", "store_true", "store_false") else None


# -- the condition a statement runs under ------------------------------------------------------
def guard_of(p: Parsed, file: str, node: cst.CSTNode) -> Guard | None:
    """The innermost ``if`` (statement or expression) whose true branch holds ``node``, read as
    a setting; None when ``node`` runs unconditionally."""
    child: cst.CSTNode = node
    for a in p.ancestors(node):
        if isinstance(a, cst.If) and child is a.body:
            return _guard(p, file, a.test)
        if isinstance(a, cst.IfExp) and child is a.body:
            return _guard(p, file, a.test)
        if isinstance(a, cst.FunctionDef | cst.ClassDef):
            return None
        child = a
    return None


def _guard(p: Parsed, file: str, test: cst.BaseExpression) -> Guard:
    wanted = True
    expr = test
    while isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        wanted, expr = not wanted, expr.expression
    return Guard(setting_of(p, file, expr), wanted, p.code_of(test))


# -- the fix: a command line, or the default edited ---------------------------------------------
def switch_to(s: Setting, value: Any, argv: Sequence[str], rel: str) -> Switch | Refusal | None:
    """The run's command line with ``s`` set to ``value``: a ``Switch``; None for a setting the
    command line does not reach (edit its default instead); a Refusal when it cannot be set."""
    if s.kind == "configurator":
        word = f"--{s.name}={_configurator_text(value)}"
        kept = [a for a in argv if not a.startswith(f"--{s.name}=")]
        return Switch(
            s.spelled,
            s.file,
            s.line,
            (word,),
            (*kept, word),
            f"{rel}:{s.line}, set from the command line by {s.reader}",
        )
    if s.kind == "argparse":
        return _argparse_switch(s, value, argv, rel)
    return None


def _configurator_text(value: Any) -> str:
    """How nanoGPT's configurator reads a value back: ``literal_eval``, else the string."""
    return value if isinstance(value, str) else repr(value)


def _argparse_switch(s: Setting, value: Any, argv: Sequence[str], rel: str) -> Switch | Refusal:
    how = f"{rel}:{s.line}, an argparse option"
    kept = _without_option(argv, s.options, takes_value=s.action == "store")
    longs = [o for o in s.options if o.startswith("--")] or list(s.options)
    flag = longs[0]
    if s.action == "BooleanOptionalAction":
        word = flag if value else "--no-" + flag[2:]
        kept = [a for a in kept if a != "--no-" + flag[2:]]
        return Switch(s.spelled, s.file, s.line, (word,), (*kept, word), how)
    if s.action in ("store_true", "store_false"):
        on = (s.action == "store_true") == bool(value)
        if not on:
            words = [a for a in argv if a in s.options]
            if not words:
                return Refusal(f"{s.spelled} is already {value!r} in this run")
            return Switch(s.spelled, s.file, s.line, (), tuple(kept), how + ": drop " + words[0])
        return Switch(s.spelled, s.file, s.line, (flag,), (*kept, flag), how)
    text = str(value)
    return Switch(s.spelled, s.file, s.line, (flag, text), (*kept, flag, text), how)


def _without_option(argv: Sequence[str], options: Sequence[str], takes_value: bool) -> list[str]:
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in options:
            skip = takes_value
            continue
        if any(a.startswith(o + "=") for o in options if o.startswith("--")):
            continue
        out.append(a)
    return out


def value_in_run(s: Setting, argv: Sequence[str]) -> Any:
    """The setting's value in a run with ``argv`` (its default unless the command line sets it;
    a config file a configurator execs is read for a literal assignment too)."""
    if s.kind == "configurator":
        value = s.default
        for a in argv:
            if a.startswith(f"--{s.name}="):
                value = _literal_or_text(a.split("=", 1)[1])
            elif not a.startswith("--"):
                value = _assigned_in(a, s.name, value, s.file)
        return value
    if s.kind == "argparse":
        if s.action in ("store_true", "store_false", "BooleanOptionalAction"):
            value = s.default
            for a in argv:
                if a in s.options:
                    value = s.action != "store_false"
                elif s.action == "BooleanOptionalAction" and a.startswith("--no-"):
                    value = False if "--" + a[5:] in s.options else value
            return value
        value = s.default
        for i, a in enumerate(argv):
            if a in s.options and i + 1 < len(argv):
                value = _literal_or_text(argv[i + 1])
            elif "=" in a and a.split("=", 1)[0] in s.options:
                value = _literal_or_text(a.split("=", 1)[1])
        return value
    return s.default


def _literal_or_text(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _assigned_in(config: str, name: str, value: Any, script: str) -> Any:
    path = _beside(script, config) if not os.path.isabs(config) else config
    if not path:
        return value
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return value
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = NOT_LITERAL
    return value


def edit_default(source: str, name: str, line: int, value: Any) -> Rewrite | Refusal:
    """The file with the setting's literal default at ``line`` replaced by ``value``: a
    module-level ``name = ...`` or a dict entry ``"name": ...``."""
    try:
        p = Parsed(source)
    except Exception as exc:  # libcst's ParserSyntaxError and friends
        return Refusal(f"the file does not parse: {type(exc).__name__}")
    code = repr(value)
    for a in p.all(cst.Assign):
        if p.line(a) == line and any(full_name(t.target) == name for t in a.targets):
            return _set_literal(p, a, a.value, name, code)
    for el in p.all(cst.DictElement):
        if p.line(el) == line and literal(el.key) == name:
            return _set_literal(p, el, el.value, f'"{name}"', code)
    return Refusal(f"no setting {name} at line {line}")


def _set_literal(
    p: Parsed, node: cst.Assign | cst.DictElement, old: cst.BaseExpression, name: str, code: str
) -> Rewrite | Refusal:
    now = literal(old)
    if now is NOT_LITERAL:
        return Refusal(f"{name} is computed (`{p.code_of(old)}`): set it there")
    if repr(now) == code:
        return Refusal(f"{name} is already {code}", already=True)
    new = node.with_changes(value=cst.parse_expression(code))
    return Rewrite(p.replace(node, new), f"{name}: {p.code_of(old)} -> {code}")
