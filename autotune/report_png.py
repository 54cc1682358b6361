"""``autotune report --png DIR``: the report's figures (:func:`autotune.html_report.build_figures`) as
PNG files, through kaleido (``pip install -e ".[png]"``), which drives a local Chrome or Chromium."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import UsageError

__all__ = ["write_pngs"]


def write_pngs(figures: Mapping[str, Any], folder: Path) -> list[Path]:
    """Write each drawn figure as ``<folder>/<name>.png`` (kaleido, which drives Chrome/Chromium).

    Raises:
        UsageError: kaleido is not installed, no Chrome/Chromium is found, or ``folder`` is not a folder.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--png {str(folder)!r} is a file; give a folder")
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise UsageError('--png needs kaleido: pip install -e ".[png]" (it also needs Chrome or Chromium installed)') from None
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in figures.items():
        if isinstance(figure, str):
            continue
        path = folder / f"{name}.png"
        for attempt in (1, 2):
            try:
                figure.write_image(str(path), width=1000, height=600)
                break
            except Exception as e:  # kaleido raises its own types when no browser is found
                # on a busy machine kaleido 1.5 can evaluate its call before its page's script has loaded
                # ("ReferenceError: kaleido_scopes is not defined"): a second try in a fresh browser renders it
                if attempt == 2 or "is not defined" not in str(e):
                    first = str(e).splitlines()[0] if str(e) else type(e).__name__
                    raise UsageError(
                        f"--png: kaleido could not render ({first}); install Chrome or Chromium, or set BROWSER_PATH to one"
                    ) from None
        written.append(path)
    return written
