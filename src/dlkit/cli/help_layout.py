"""``--help`` off a terminal: laid out wide enough that nothing is cut.

typer prints help through a rich console as wide as the terminal, or 80 columns (``COLUMNS``)
when standard output is a pipe or a file. An options table wider than that is squeezed, and a
word that cannot wrap (an option name such as ``--context-example-policy``, a metavar
``<recent|random|parent>``, ``madvise(MADV_WILLNEED)``) is cut to ``--context-example-p…``.
On a terminal that is the price of its width; off one, nothing limits the width, so the
help is laid out at the usual width, widened just enough for its longest unbreakable word:
text still wraps between words, never inside one.

typer asks ``typer.rich_utils._get_rich_console`` for the console of each rendering; while
:func:`fitted` holds, that console records what is printed, and the recording is printed
at the end on a console of the width the widest part needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

# The width help is laid out at off a terminal when rich's table layout cannot be measured
# (its methods this module calls are rich's own, not its documented interface).
FALLBACK_WIDTH = 160


class _Recording(Console):
    """A console that keeps each ``print`` call (objects and options) instead of printing."""

    def __init__(self, real: Console):
        super().__init__(file=real.file, width=real.width)
        self.real = real  # where the recording is printed
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.calls.append((objects, kwargs))


def _cell_minimum(console: Console, options: Any, renderable: Any) -> int:
    """The longest word of a table cell. rich measures neither ``Columns`` (typer's help
    cell) nor ``Markdown`` (its text): a cell of either would count as fitting any width."""
    from rich.cells import cell_len
    from rich.columns import Columns
    from rich.markdown import Markdown
    from rich.measure import Measurement

    if isinstance(renderable, Columns):
        return max((_cell_minimum(console, options, r) for r in renderable.renderables),
                   default=0)
    if isinstance(renderable, Markdown):  # its source's words: as long as, or longer than, shown
        return max(map(cell_len, renderable.markup.split()), default=0)
    return Measurement.get(console, options, renderable).minimum


def _table_fits(console: Console, table: Any, width: int) -> bool:
    """Whether rich lays ``table`` out in ``width`` columns with every column at least as
    wide as its longest word. rich squeezes the widest columns first and then all of them
    evenly, whatever their words need, so fitting the sum of the minimums is not enough:
    the layout it would choose (its own method, as ``Table.__rich_console__`` calls it) is
    what is checked."""
    options = console.options.update_width(max(1, width - table._extra_width))
    widths = table._calculate_column_widths(console, options)
    for width_given, column in zip(widths, table.columns, strict=True):
        needed = max((_cell_minimum(console, options, cell) for cell in column._cells),
                     default=0) + table._get_padding_width(column._index)
        if width_given < needed:
            return False
    return True


def _needed(console: Console, renderable: Any, width: int) -> int:
    """The narrowest width from ``width`` up at which ``renderable`` cuts no word."""
    from rich.measure import Measurement
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table

    if isinstance(renderable, str):
        renderable = console.render_str(renderable)
    if isinstance(renderable, Panel):
        _top, right, _bottom, left = Padding.unpack(renderable.padding)
        frame = left + right + 2
        return _needed(console, renderable.renderable, width - frame) + frame
    if isinstance(renderable, Table):
        if _table_fits(console, renderable, width):
            return width
        wide = console.options.update_width(1 << 15)
        low, high = width, Measurement.get(console, wide, renderable).maximum
        while low < high:  # the natural width fits: nothing is squeezed there
            middle = (low + high) // 2
            if _table_fits(console, renderable, middle):
                high = middle
            else:
                low = middle + 1
        return high
    options = console.options.update_width(1 << 15)
    return max(width, Measurement.get(console, options, renderable).minimum)


def _needed_width(console: Console, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> int:
    """The narrowest width from the console's own at which no recorded object cuts a word."""
    return max((_needed(console, renderable, console.width)
                for objects, _kwargs in calls for renderable in objects),
               default=console.width)


@contextlib.contextmanager
def fitted(rich_utils: Any) -> Iterator[None]:
    """While it holds, help printed off a terminal is laid out at its console's width, or
    wider when a word would be cut otherwise; on a terminal it is left as typer makes it."""
    make: Callable[..., Console] = rich_utils._get_rich_console
    recordings: list[_Recording] = []

    def recording_console(stderr: bool = False) -> Console:
        real = make(stderr=stderr)
        if stderr or real.is_terminal:
            return real
        recording = _Recording(real)
        recordings.append(recording)
        return recording

    rich_utils._get_rich_console = recording_console
    try:
        yield
    finally:
        rich_utils._get_rich_console = make
    for recording in recordings:
        real = recording.real
        try:
            real.width = _needed_width(real, recording.calls)
        except (AttributeError, TypeError):  # a rich without the layout methods measured
            real.width = max(real.width, FALLBACK_WIDTH)
        for objects, kwargs in recording.calls:
            real.print(*objects, **kwargs)


def install(*command_classes: type[Any]) -> None:
    """Make ``format_help`` of each typer command class lay out its help with
    :func:`fitted` (typer and rich are imported when help is asked for, not before)."""
    for cls in command_classes:
        original = cls.format_help
        if getattr(original, "_dlkit_fitted", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any,
                        _original: Callable[..., None] = original) -> None:
            from typer import rich_utils

            with fitted(rich_utils):
                _original(self, ctx, formatter)

        format_help._dlkit_fitted = True  # type: ignore[attr-defined]
        cls.format_help = format_help
