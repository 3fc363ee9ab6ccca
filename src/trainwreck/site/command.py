"""`trainwreck build` and `trainwreck serve` on the command line."""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import socketserver
import sys
from pathlib import Path
from typing import Any

from trainwreck.site.errors import BuildError
from trainwreck.site.pipeline import build


def configure_build_parser(parser: argparse.ArgumentParser) -> None:
    from trainwreck.reproduce.command import jobs_value

    parser.add_argument(
        "--no-reproduce",
        action="store_true",
        help="do not run notebooks; use build/manifest.json as it is",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=jobs_value,
        default=1,
        metavar="N",
        help="notebooks to run in parallel; auto: one per CPU this process may use (default 1)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also fail on check warnings and failed notebooks (the site build is always strict)",
    )
    parser.add_argument("--site-dir", default=None, help="output folder (default: site/)")


class TerminalLines:
    """The build's progress on stderr. A line that starts with "\r" is rewritten in place on a
    terminal (the notebooks' one progress line) and printed as a line of its own elsewhere (a
    log file, CI); the next ordinary line starts below it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        isatty = getattr(stream, "isatty", None)
        self.in_place = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.open = False  # a rewritten line is on screen, with no newline yet

    def __call__(self, line: str) -> None:
        if line.startswith("\r"):
            if self.in_place:
                self.stream.write("\r\x1b[K" + line[1:])
                self.stream.flush()
                self.open = True
                return
            line = line[1:]
        if self.open:
            self.stream.write("\n")
            self.open = False
        self.stream.write(line + "\n")
        self.stream.flush()


def run_build(args: argparse.Namespace) -> int:
    say = TerminalLines(sys.stderr)
    try:
        summary = build(
            args.root,
            reproduce=not args.no_reproduce,
            jobs=max(1, args.jobs),
            strict=args.strict,
            site_dir=args.site_dir,
            progress=say,
        )
    except BuildError as exc:
        print(exc.report("build"), file=sys.stderr)
        return exc.exit_code
    except (OSError, UnicodeError) as exc:
        # A file that cannot be read or written (permissions, disk full): one line, no traceback.
        print(f"trainwreck build: {exc}", file=sys.stderr)
        return 1
    print("built site/" if not args.site_dir else f"built {args.site_dir}")
    for line in summary.lines():
        print(f"  {line}")
    if summary.failed:
        print(
            f"trainwreck build: {len(summary.failed)} notebook(s) failed; their pages say so",
            file=sys.stderr,
        )
        return 1
    return 0


def configure_serve_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--site-dir", default=None, help="folder to serve (default: site/)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("TRAINWRECK_SERVE_LOG"):
            super().log_message(format, *args)


def make_server(site: Path, host: str = "127.0.0.1", port: int = 0) -> socketserver.TCPServer:
    """An HTTP server over `site` (port 0 picks a free port: server.server_address[1])."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    return http.server.ThreadingHTTPServer((host, port), handler)


def run_serve(args: argparse.Namespace) -> int:
    root = Path(args.root)
    site = Path(args.site_dir) if args.site_dir else root / "site"
    if not (site / "index.html").is_file():
        print(
            f"trainwreck serve: {site}/index.html does not exist; run `trainwreck build` first",
            file=sys.stderr,
        )
        return 2
    try:
        server = make_server(site, args.host, args.port)
    except OSError as exc:
        print(
            f"trainwreck serve: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address[:2]
    print(f"serving {site}/ at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
