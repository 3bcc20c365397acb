"""Command-line values turned into their types without Pydantic, where that is plain.

typer (0.2x) converts every option's text through a Pydantic ``TypeAdapter``: importing
Pydantic and building the adapters costs about a tenth of a second of every command, a
ninth of `dlkit sample -n 10`. For the values dlkit's commands take (text, whole and decimal
numbers within their bounds, paths, lists of text, choices, dlkit's own parsers) the
conversion is plain Python, and this module does it; anything else (a value out of bounds,
a number written another way, a type without a plain rule, a parser that refuses) goes to
typer's own conversion, so its errors, word for word, are typer's. Paths go through typer's
own checks (existence, file or directory, readable) with the text made a ``Path`` first,
which is all Pydantic does for them. ``tests/cli/test_coercion.py`` holds both conversions
equal on every option of every command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

from typer._coercion import RuntimeParam, build_runtime_param
from typer._param_types import coerce_cli_choice, coerce_cli_path

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_UNSURE = object()


def _number(annotation: type, info: Any, value: object) -> object:
    if isinstance(value, bool):
        return _UNSURE
    if isinstance(value, str):
        text = value.strip()
        pattern = _INTEGER if annotation is int else _DECIMAL
        if not pattern.fullmatch(text):
            return _UNSURE
        number: int | float = int(text) if annotation is int else float(text)
    elif isinstance(value, int) or (annotation is float and isinstance(value, float)):
        number = value if annotation is int else float(value)
    else:
        return _UNSURE
    if info.clamp or (info.min is not None and number < info.min) or (
            info.max is not None and number > info.max):
        return _UNSURE  # typer words the error (or clamps)
    return number


def _plain(annotation: Any, info: Any, value: object, ctx: Any) -> object:
    """``value`` as ``annotation``, or ``_UNSURE`` when typer should decide."""
    if info.parser is not None:  # dlkit's parsers are pure: a failure is worded by typer
        try:
            return info.parser(value)
        except Exception:  # noqa: BLE001 - typer runs it again and words the error
            return _UNSURE
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        try:
            return coerce_cli_choice(value, choices=tuple(annotation),
                                     case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return _UNSURE
    if annotation is str:
        return value if isinstance(value, str) else _UNSURE
    if annotation in (int, float):
        return _number(annotation, info, value)
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
    return _UNSURE


@dataclass(frozen=True)
class PlainRuntimeParam(RuntimeParam):
    """typer's conversion of one parameter, without Pydantic where the value is plain."""

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        info = self.parameter_info
        if (self.annotation is Path and info.path_type is None and info.parser is None
                and isinstance(value, str)):
            try:
                return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
            except ValueError:  # a NUL byte: typer words it (through Pydantic)
                pass
        else:
            plain = _plain(self.annotation, info, value, ctx)
            if plain is not _UNSURE:
                return plain
        return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param,
                                                                        ctx=ctx)


def install(param: Any) -> None:
    """Let ``param`` (a typer parameter) convert its values here first. Parameters typer
    opens as files, and typer versions without this seam, are left as they are."""
    descriptor = getattr(param, "type_descriptor", None)
    if (descriptor is None or getattr(descriptor, "file_annotation", True) is not None
            or getattr(param, "_runtime_param", False) is not None):
        return
    param._runtime_param = PlainRuntimeParam(annotation=descriptor.annotation,
                                             parameter_info=descriptor.parameter_info)
