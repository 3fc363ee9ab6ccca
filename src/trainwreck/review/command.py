"""`trainwreck review`: its options and its run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainwreck.review.base import ReviewError
from trainwreck.review.compare import review_change
from trainwreck.review.markdown import render_markdown


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base",
        default="main",
        metavar="REF",
        help="git ref to compare the working tree with (default: main)",
    )
    parser.add_argument(
        "--out", default=None, metavar="FILE", help="write the Markdown here instead of stdout"
    )


def run(args: argparse.Namespace) -> int:
    review = review_change(Path(args.root), args.base)
    text = render_markdown(review)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ReviewError(f"cannot write {args.out}: {exc}") from None
    else:
        sys.stdout.write(text)
    broken = review.broken
    for line in broken:
        print(f"trainwreck review: broken: {line}", file=sys.stderr)
    return 1 if broken else 0
