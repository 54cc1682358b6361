"""A trial table fitted to the terminal's width: columns left out by rank, free text wrapped (rich); and
the console that output goes to (:func:`terminal_console`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["TableColumn", "fitted_table", "terminal_console"]


class TableColumn(NamedTuple):
    """A column of a trial table: its row key, header, and rank (0: always shown; the highest is left
    out first when the table is too wide); ``text`` columns wrap at spaces, ``right`` ones are right-justified."""

    key: str
    label: str
    rank: int
    text: bool = False
    right: bool = True


#: Width (terminal columns) below which a free-text column is not narrowed: wider than its usual words
#: (``recommended``, ``duplicate``, ``infeasible:``), so that they stay whole.
_TEXT_MIN_WIDTH = 12
#: A free-text column is at least as wide as its longest word up to this width (terminal columns), so
#: that ``compile=max-autotune,`` stays whole; a longer word (a path in a failure reason) ends in "…".
_TEXT_WORD_WIDTH = 24


def fitted_table(
    columns: Sequence[TableColumn],
    rows: Sequence[tuple[Sequence[str], str | None]],
    width: int,
    title: str | None = None,
    more: str | None = None,
):
    """A rich table of ``rows`` at most ``width`` terminal columns wide that never splits a value.

    A value (a number, a state, a precision) stays whole on one line, its column as wide as its widest
    value or its header's longest word (headers wrap at spaces); free-text columns (``text``) wrap at
    spaces, at least :data:`_TEXT_MIN_WIDTH` wide where their text is and as wide as their longest word
    up to :data:`_TEXT_WORD_WIDTH` (a longer word ends in "…"). A
    column no row fills is left out. When the boxed table is wider than ``width``, a compact one is
    drawn instead (a rule under the header, two spaces between columns), and when that is still too
    wide, the columns of the highest rank are left out until it fits; a caption names them, and
    ``more``, where given, where to see them all. Rank-0 columns are never left out (with them alone
    wider than ``width``, rich cuts their values with "…").

    Args:
        columns: The columns in the order shown.
        rows: Each row's cells (text, in ``columns`` order) and its rich style (or None).
        width: The most terminal columns the table may take (>= 1), as :attr:`rich.console.Console.width`.
        title: The table's title.
        more: Where to see the columns left out (``"autotune show --format json"``).

    Returns:
        A :class:`rich.table.Table`.
    """
    from rich import box
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    def longest(texts) -> int:
        return max((cell_len(line) for text in texts for line in text.splitlines()), default=0)

    keep = [i for i, c in enumerate(columns) if c.rank == 0 or not rows or any(cells[i] for cells, _ in rows)]
    span = {}  # (least, most) content width of each column
    for i in keep:
        label = longest(columns[i].label.split())
        widest = max(label, longest(cells[i] for cells, _ in rows))
        if columns[i].text:
            word = min(longest(w for cells, _ in rows for w in cells[i].split()), _TEXT_WORD_WIDTH)
            span[i] = (min(widest, max(label, word, _TEXT_MIN_WIDTH)), widest)
        else:
            span[i] = (widest, widest)
    compact = False

    def overflow(kept) -> int:  # terminal columns over ``width`` at the least content widths
        borders = max(2 * len(kept) - 2, 0) if compact else 3 * len(kept) + 1  # padding, rules and edges
        return sum(span[i][0] for i in kept) + borders - width

    compact = overflow(keep) > 0
    left_out = set()
    while overflow(keep) > 0 and any(columns[i].rank > 0 for i in keep):
        drop = max((i for i in keep if columns[i].rank > 0), key=lambda i: columns[i].rank)
        keep.remove(drop)
        left_out.add(drop)
    # free-text columns share what is left, each up to its widest text
    sizes = {i: span[i][0] for i in keep}
    spare = -overflow(keep)
    growing = sorted((i for i in keep if span[i][1] > span[i][0]), key=lambda i: span[i][1] - span[i][0])
    for n, i in enumerate(growing):
        grow = min(span[i][1] - span[i][0], max(spare, 0) // (len(growing) - n))
        sizes[i] += grow
        spare -= grow
    caption = None
    if left_out:
        names = ", ".join(columns[i].label for i in sorted(left_out))
        caption = f"left out to fit {width} columns: {names}" + (f" (all in {more})" if more else "")
    table = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        show_edge=not compact,
        padding=(0, 1, 0, 0) if compact else (0, 1),
        pad_edge=not compact,
    )
    for i in keep:  # (a header wraps at its spaces)
        table.add_column(Text(columns[i].label), justify="right" if columns[i].right else "left", width=sizes[i], overflow="ellipsis")
    for cells, row_style in rows:
        table.add_row(*(Text(cells[i], no_wrap=not columns[i].text) for i in keep), style=row_style)
    return table


#: Width (terminal columns) of output to a pipe or a file when ``$COLUMNS`` is not set.
_PIPE_WIDTH = 160


def terminal_console(stderr: bool = False):
    """A rich Console for stdout (or stderr): the terminal's width, ``$COLUMNS``, else :data:`_PIPE_WIDTH`
    in a pipe; one line per message; a reader that went away stops output as Ctrl-C does."""
    import errno
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # a terminal's width, or $COLUMNS (rich reads it); CI logs and pipes without $COLUMNS get wide,
    # plain lines instead of rich's default 80 columns
    width = None if stream.isatty() or os.environ.get("COLUMNS", "").strip().isdigit() else _PIPE_WIDTH

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """The reader went away (``| head``): print nothing more, and leave the exit to
            :func:`autotune.cli.main` (code 141, as every command) instead of rich's exit with code 1;
            a search or worker first stops as Ctrl-C does (:func:`autotune.errors.stop_for_closed_output`)."""
            from autotune.errors import stop_for_closed_output

            self.quiet = True
            if stderr or not stop_for_closed_output():
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    # messages are one line each however narrow the width (greppable logs); only tables fit it
    return _Console(stderr=stderr, highlight=False, width=width, soft_wrap=True)
