"""`trainwreck export loki|prometheus`: the rules as alerting rule files, their escaping, and
promtool's verdict on them (when Debian's `prometheus` package provides promtool)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import re2
import yaml

from trainwreck.cli import main
from trainwreck.compile.packs import resolve
from trainwreck.export import loki, prometheus
from trainwreck.export.rulefile import AlertRule, alert_name, dump, quote_string, template_text
from trainwreck.rules.matchers import RegexMatcher
from trainwreck.rules.rule import Rule, read_rules

ROOT = Path(__file__).resolve().parents[1]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
ALERT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
FILTER = re.compile(r'\|~ ("(?:[^"\\]|\\.)*")')


@pytest.fixture(scope="module")
def checkout() -> tuple[list[Rule], dict]:
    rule_set = resolve(ROOT, None, use_installed=False)
    rules, broken = read_rules(rule_set.rules)
    assert not broken
    return rules, rule_set.entries


@pytest.fixture(scope="module")
def loki_export(checkout) -> loki.LokiExport:
    rules, entries = checkout
    return loki.export(rules, entries)


def line_filters(expr: str) -> list[str]:
    """The regexes of an expression's `|~` filters (our strings use only JSON's escapes)."""
    return [json.loads(quoted) for quoted in FILTER.findall(expr)]


def test_most_regex_rules_are_exported_and_the_rest_say_why(checkout, loki_export):
    rules, _ = checkout
    exported = {item.rule for item in loki_export.exported}
    refused = {item.rule: item.reason for item in loki_export.not_exported}
    assert exported | set(refused) == {rule.id for rule in rules}
    assert not exported & set(refused)
    assert len(exported) >= 0.8 * len(rules)
    assert all(refused.values())
    # series detectors and probe events have no LogQL form
    assert "detector" in refused["gc-straggler-probe-gc"]
    assert "block matcher" in refused["allocator-fragmentation-memory-summary"]
    assert "captured" in refused["allocator-fragmentation-oom"]


def test_every_line_filter_is_re2_and_matches_what_the_rule_matches(checkout, loki_export):
    """The filter of each exported rule is the rule's patterns without their captures: on every
    example line of the rule set, it matches exactly when one of the rule's own patterns it
    holds does."""
    rules, _ = checkout
    by_id = {rule.id: rule for rule in rules}
    texts = [str(e["text"]) for rule in rules for e in rule.examples if e.get("text")]
    assert len(texts) > 200
    for item in loki_export.exported:
        rule = by_id[item.rule]
        own = [re2.compile(m.regex) for m in rule.matchers.values() if isinstance(m, RegexMatcher)]
        for pattern in line_filters(item.expr):
            compiled = re2.compile(pattern)
            for text in texts:
                if compiled.search(text):
                    assert any(p.search(text) for p in own), (item.rule, pattern, text)
        for example in rule.examples:
            matcher = rule.matchers.get(str(example.get("matcher", "")))
            if not isinstance(matcher, RegexMatcher) or not example.get("text"):
                continue
            try:
                translated = loki.logql_regex(matcher.regex)
            except loki.Untranslatable:
                continue
            text = str(example["text"])
            assert bool(re2.compile(translated).search(text)) == bool(
                re2.compile(matcher.regex).search(text)
            ), (rule.id, text)


def test_conditions_map_to_logql_operators(loki_export):
    exprs = {item.rule: item.expr for item in loki_export.exported}
    # `a and not b` -> unless; a count threshold stays a threshold
    assert " unless " in exprs["checkpoint-disk-full-cannot-open"]
    assert ") >= 3" in exprs["zero3-inflight-params"]
    assert exprs["autograd-inplace-modified"].startswith(
        'sum by (job) (count_over_time({job=~".+"} |~ "'
    )
    assert exprs["autograd-inplace-modified"].endswith("[5m])) > 0")
    partial = {item.rule: item.left_out for item in loki_export.exported if item.left_out}
    assert any("JSON matcher" in why for why in partial["nan-loss-value"])


def test_anchored_and_go_incompatible_patterns_are_refused():
    with pytest.raises(loki.Untranslatable, match="anchored"):
        loki.logql_regex("^RuntimeError: Address already in use$")
    with pytest.raises(loki.Untranslatable, match="Go"):
        loki.logql_regex("a\\Cb")
    with pytest.raises(loki.Untranslatable, match="RE2"):
        loki.logql_regex("(?<=x)y")
    assert loki.logql_regex(r"rank (?P<rank>\d+) (?<op>\w+)") == r"rank (?:\d+) (?:\w+)"
    assert loki.logql_regex(r"\(?P<x>not a group") == r"\(?P<x>not a group"


def test_contributed_text_is_escaped_for_yaml_templates_and_queries():
    hostile = 'say "hi"\\ {{ .Value }}\nnext\t\x01 `x`'
    quoted = quote_string(hostile)
    assert "\n" not in quoted and '\\"' in quoted and "\\x01" in quoted
    assert json.loads(quoted.replace("\\x01", "\\u0001")) == hostile
    assert template_text("a {{ b }}") == 'a {{ "{{" }} b }}'
    assert ALERT_NAME.match(alert_name("trainwreck", "nan-loss-value"))
    assert alert_name("trainwreck", "nan-loss-value") == "TrainwreckNanLossValue"
    assert alert_name("9lives") == "Trainwreck9lives"
    text = dump(
        "g",
        [
            AlertRule(
                "A", "vector(1) > 0", labels={"entry": hostile}, annotations={"summary": hostile}
            )
        ],
    )
    read = yaml.safe_load(text)["groups"][0]["rules"][0]
    assert read["labels"]["entry"] == template_text(hostile)
    assert read["annotations"]["summary"] == template_text(hostile)


@needs_promtool
def test_promtool_accepts_the_prometheus_rules_and_hostile_annotations(checkout, tmp_path):
    rules, entries = checkout
    hostile = {
        key: {**value, "title": 'T {{ $value }} "q"\n', "quick_answer": "{{ template }} `x`"}
        for key, value in entries.items()
    }
    result = prometheus.export(rules, hostile)
    assert len(result.alerts) == 5 and not result.not_exported
    path = tmp_path / "rules.yaml"
    path.write_text(dump("trainwreck", [*result.recordings, *result.alerts]))
    done = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


PROMTOOL_TEST = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'trainwreck_metric{{job="train", rank="0", name="loss"}}'
        values: '2 1.5 NaN NaN'
      - series: 'trainwreck_gc_pause_seconds_count{{job="train", rank="1", generation="2"}}'
        values: '0 1 2 3 4 5'
      - series: 'trainwreck_gc_pause_seconds_bucket{{job="train", rank="1", generation="2", le="0.1"}}'
        values: '0 0 0 0 0 0'
      - series: 'trainwreck_cuda_alloc_retries_total{{job="train", rank="0"}}'
        values: '0 0 0 0 0 0'
    alert_rule_test:
      - eval_time: 3m
        alertname: TrainwreckNanLoss
        exp_alerts:
          - exp_labels: {{job: train, rank: "0", name: loss, severity: {nan_severity}, entry: nan-loss, rule: nan-loss-value, source: trainwreck}}
            exp_annotations: {nan_annotations}
      - eval_time: 1m
        alertname: TrainwreckNanLoss
      - eval_time: 5m
        alertname: TrainwreckGcLongPauses
        exp_alerts:
          - exp_labels: {{job: train, rank: "1", severity: {gc_severity}, entry: python-gc-straggler, rule: gc-straggler-probe-gc, source: trainwreck}}
            exp_annotations: {gc_annotations}
      - eval_time: 5m
        alertname: TrainwreckCudaMallocRetriesRising
  - interval: 1m
    input_series:
      # one step a second: 0.1 s per step for 30 minutes, then 0.2 s
      - series: 'trainwreck_step_seconds_count{{job="train", rank="0"}}'
        values: '0+60x40'
      - series: 'trainwreck_step_seconds_sum{{job="train", rank="0"}}'
        values: '0+6x30 192+12x9'
      # rank 1's full collections: none, then one above 100 ms a minute
      - series: 'trainwreck_gc_pause_seconds_count{{job="train", rank="1", generation="2"}}'
        values: '0+0x30 1+1x9'
      - series: 'trainwreck_gc_pause_seconds_bucket{{job="train", rank="1", generation="2", le="0.1"}}'
        values: '0+0x40'
    alert_rule_test:
      - eval_time: 25m
        alertname: TrainwreckGcStraggler
      - eval_time: 40m
        alertname: TrainwreckStepTimeStall
        exp_alerts:
          - exp_labels: {{job: train, rank: "0", severity: {gc_severity}, entry: python-gc-straggler, rule: gc-straggler-step-time, source: trainwreck}}
            exp_annotations: {stall_annotations}
      - eval_time: 40m
        alertname: TrainwreckGcStraggler
        exp_alerts:
          - exp_labels: {{job: train, severity: {gc_severity}, entry: python-gc-straggler, rule: gc-straggler-probe-gc, source: trainwreck}}
            exp_annotations: {straggler_annotations}
"""


@needs_promtool
def test_promtool_fires_the_alerts_on_series_that_show_the_fingerprint(checkout, tmp_path):
    """promtool's own rule tests: a NaN loss fires TrainwreckNanLoss (and a finite one does
    not), repeated long full collections fire TrainwreckGcLongPauses, flat retries fire nothing;
    steps doubling from 0.1 s to 0.2 s fire TrainwreckStepTimeStall, and with rank 1's long
    collections in the same job, TrainwreckGcStraggler (not before)."""
    rules, entries = checkout
    result = prometheus.export(rules, entries)
    (tmp_path / "rules.yaml").write_text(dump("trainwreck", [*result.recordings, *result.alerts]))
    alerts = {alert.alert: alert.to_dict() for alert in result.alerts}

    def flow(mapping: dict) -> str:
        return json.dumps(mapping)

    (tmp_path / "test.yaml").write_text(
        PROMTOOL_TEST.format(
            rules="rules.yaml",
            nan_severity=entries["nan-loss"]["severity"],
            nan_annotations=flow(alerts["TrainwreckNanLoss"]["annotations"]),
            gc_severity=entries["python-gc-straggler"]["severity"],
            gc_annotations=flow(alerts["TrainwreckGcLongPauses"]["annotations"]),
            stall_annotations=flow(alerts["TrainwreckStepTimeStall"]["annotations"]),
            straggler_annotations=flow(alerts["TrainwreckGcStraggler"]["annotations"]),
        )
    )
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "test.yaml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_command_writes_both_files_and_reports_counts(tmp_path, capsys):
    assert (
        main(["export", "loki", "--out", str(tmp_path), "--root", str(ROOT), "--no-installed"]) == 0
    )
    out = capsys.readouterr().out
    counts = re.search(r"(\d+) of (\d+) rules exported", out)
    assert counts and int(counts[1]) >= 0.8 * int(counts[2])
    assert "gc-straggler-probe-gc: " in out
    document = yaml.safe_load((tmp_path / "trainwreck-loki.yaml").read_text())
    alerts = document["groups"][0]["rules"]
    assert len(alerts) == int(counts[1])
    for alert in alerts:
        assert ALERT_NAME.match(alert["alert"]) and alert["expr"] and "for" in alert
        assert alert["labels"]["source"] == "trainwreck" and alert["labels"]["entry"]
        assert alert["annotations"]["description"]
    assert main(["export", "prometheus", "--out", str(tmp_path), "--root", str(ROOT)]) == 0
    assert (tmp_path / "trainwreck-prometheus.yaml").is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--window", "5 minutes"], "not a duration"),
        (["--by", "job,bad-label"], "not a label name"),
        (["--selector", "job=train"], "not a LogQL stream selector"),
    ],
)
def test_bad_options_are_one_line_usage_errors(tmp_path, capsys, extra, message):
    assert main(["export", "loki", "--out", str(tmp_path), "--root", str(ROOT), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_core_commands_import_neither_extra():
    """export and diagnose run on the core install: neither imports mcp or prometheus_client."""
    import sys

    probe = (
        "import sys, tempfile\n"
        "from trainwreck.cli import main\n"
        f"main(['export', 'loki', '--out', tempfile.mkdtemp(), '--root', {str(ROOT)!r}])\n"
        f"main(['export', 'prometheus', '--out', tempfile.mkdtemp(), '--root', {str(ROOT)!r}])\n"
        "extras = [m for m in ('mcp', 'prometheus_client', 'pydantic') if m in sys.modules]\n"
        "print('EXTRAS', extras, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert "EXTRAS []" in done.stderr, done.stderr[-2000:]


def test_mcp_without_the_sdk_is_a_one_line_usage_error(monkeypatch, capsys):
    """(here for want of a better home: tests/test_mcp.py needs the SDK.) Without the `mcp`
    extra the command says what to install, before reading any rule."""
    import sys

    for name in ("mcp", "mcp.server", "mcp.server.mcpserver"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError
    assert main(["mcp", "--root", str(ROOT)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'trainwreck[mcp]'" in err and len(err.strip().splitlines()) == 1
