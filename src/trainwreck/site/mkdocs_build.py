"""`mkdocs build --strict` of the assembled docs dir (mkdocs imported only here, when used)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainwreck.site.errors import BuildError
from trainwreck.site.nav import compose_nav
from trainwreck.site.search_worker import repair_search_worker

Progress = Callable[[str], None]


class _Collect(logging.Handler):
    """Collects mkdocs' warnings and errors (strict: any of them fails the build)."""

    def __init__(self, echo: Progress | None) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        self.messages.append(f"{record.levelname.lower()}: {message}")
        if self.echo:
            self.echo(f"mkdocs {record.levelname.lower()}: {message}")


def run_mkdocs(root: Path, docs_dir: Path, site_dir: Path, failures_nav: list[Any]) -> int:
    """`mkdocs build --strict` of `docs_dir` with mkdocs.yml's settings; returns HTML pages."""
    try:
        from mkdocs import exceptions as mkdocs_exceptions
        from mkdocs.commands.build import build as mkdocs_build
        from mkdocs.config import load_config
    except ImportError:
        raise BuildError(
            "the site needs mkdocs and mkdocs-material: pip install 'trainwreck[site]'"
        ) from None
    config_file = root / "mkdocs.yml"
    if not config_file.is_file():
        raise BuildError(f"{config_file}: no mkdocs.yml")
    collector = _Collect(echo=lambda line: print(f"  {line}", file=sys.stderr))
    logger = logging.getLogger("mkdocs")
    logger.addHandler(collector)
    previous_level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        base = load_config(str(config_file), docs_dir=str(docs_dir), site_dir=str(site_dir))
        nav = compose_nav(base.get("nav"), failures_nav, docs_dir)
        config = load_config(
            str(config_file),
            docs_dir=str(docs_dir),
            site_dir=str(site_dir),
            strict=True,
            nav=nav,
        )
        if collector.messages:
            raise BuildError(f"mkdocs.yml: {collector.messages[0]}")
        mkdocs_build(config)
        # lunr's word automaton merges unequal nodes when labels are digits (search_worker.py)
        repair_search_worker(site_dir)
    except mkdocs_exceptions.ConfigurationError as exc:
        raise BuildError(f"mkdocs.yml: {' '.join(str(exc).split())}") from None
    except mkdocs_exceptions.MkDocsException as exc:
        first = collector.messages[0] if collector.messages else str(exc)
        more = len(collector.messages) - 1
        suffix = f" (and {more} more above)" if more > 0 else ""
        raise BuildError(f"mkdocs build --strict failed: {first}{suffix}") from None
    except OSError as exc:
        raise BuildError(f"mkdocs build failed: {exc}") from None
    finally:
        logger.removeHandler(collector)
        logger.setLevel(previous_level)
    return sum(1 for _ in site_dir.rglob("*.html"))
