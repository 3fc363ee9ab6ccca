"""`trainwreck export loki|prometheus --out DIR`: the rules as alerting rule files.

    trainwreck export loki --out alerts/          # alerts/trainwreck-loki.yaml for the Loki ruler
    trainwreck export prometheus --out alerts/    # alerts/trainwreck-prometheus.yaml (probe metrics)

Both files are in the Prometheus rule-file format. The command prints how many rules were
exported and, for each rule that was not, why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainwreck.compile.bundle import BundleError
from trainwreck.compile.packs import resolve
from trainwreck.errors import UsageError
from trainwreck.export import loki, prometheus
from trainwreck.export.rulefile import check_duration, check_label_names, dump
from trainwreck.rules.rule import Rule, read_rules
from trainwreck.sanitize import report_text

LOKI_FILE = "trainwreck-loki.yaml"
PROMETHEUS_FILE = "trainwreck-prometheus.yaml"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=("loki", "prometheus"), help="which rule files")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the rule file")
    parser.add_argument(
        "--rules", action="append", metavar="PATH", help="a rule bundle or rules folder to use"
    )
    parser.add_argument("--no-installed", action="store_true", help="ignore installed rule packs")
    parser.add_argument(
        "--window", default=None, help="the window alerts count over (loki 5m, prometheus 15m)"
    )
    parser.add_argument(
        "--selector",
        default=loki.DEFAULT_SELECTOR,
        help=f"loki: the stream selector of the training logs (default {loki.DEFAULT_SELECTOR})",
    )
    parser.add_argument(
        "--by",
        default=",".join(loki.DEFAULT_GROUP_BY),
        help="loki: labels each alert counts per, comma-separated (default job)",
    )
    parser.add_argument(
        "--loss-metric",
        default=prometheus.DEFAULT_LOSS_METRIC,
        help="prometheus: the probe.log name of the loss (default loss)",
    )


def _rules(args: argparse.Namespace) -> tuple[list[Rule], dict[str, dict[str, object]]]:
    try:
        rule_set = resolve(Path(args.root), args.rules, use_installed=not args.no_installed)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    rules, _ = read_rules(rule_set.rules)
    if not rules:
        raise UsageError(
            "no rules to export: run in a checkout, install a rule pack or pass --rules"
        )
    return rules, rule_set.entries


def _write(folder: str, name: str, text: str) -> Path:
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / name
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out / name}: {exc.strerror or exc}") from None
    return path


def run(args: argparse.Namespace) -> int:
    try:
        window = check_duration(
            args.window or (loki.DEFAULT_WINDOW if args.target == "loki" else "15m"), "--window"
        )
        group_by = check_label_names([b.strip() for b in args.by.split(",") if b.strip()])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not group_by:
        raise UsageError("--by needs at least one label name")
    selector = args.selector.strip()
    if not (selector.startswith("{") and selector.endswith("}")):
        raise UsageError(
            f'--selector {selector!r} is not a LogQL stream selector such as {{job="train"}}'
        )
    rules, entries = _rules(args)
    if args.target == "loki":
        result = loki.export(rules, entries, selector=selector, window=window, group_by=group_by)
        partial = sum(1 for item in result.exported if item.left_out)
        header = (
            "Loki ruler alerting rules written by `trainwreck export loki`.\n"
            f"{len(result.exported)} of {len(rules)} rules exported ({partial} without some "
            f"branches), {len(result.not_exported)} not exported."
        )
        path = _write(args.out, LOKI_FILE, dump("trainwreck", result.alerts, header))
        print(
            f"trainwreck export: {len(result.exported)} of {len(rules)} rules exported to {path} "
            f"({partial} without some branches of an `or`); {len(result.not_exported)} not exported:"
        )
        for item in result.not_exported:
            print(f"  {item.rule}: {report_text(item.reason)}")
        return 0
    exported = prometheus.export(rules, entries, window=window, loss_metric=args.loss_metric)
    header = (
        "Prometheus alerting rules over the trainwreck probe's metrics "
        "(trainwreck.probe.prometheus), written by `trainwreck export prometheus`."
    )
    text = dump("trainwreck", [*exported.recordings, *exported.alerts], header)
    path = _write(args.out, PROMETHEUS_FILE, text)
    print(
        f"trainwreck export: {len(exported.alerts)} alerts and {len(exported.recordings)} "
        f"recording rules written to {path}"
    )
    for name, why in exported.not_exported:
        print(f"  not exported: {name}: {report_text(why)}", file=sys.stderr)
    return 0
