"""The metric vocabulary (rules/metrics.py): each print shape read by the built pattern, the
held-out and prefixed keys left out, and the `metric` matcher kind through a rule end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import re2

from trainwreck.rules.matchers import MetricMatcher, matcher_from_yaml
from trainwreck.rules.metrics import VOCABULARY, metric_names, metric_regex
from trainwreck.rules.regexes import required_literals
from trainwreck.rules.units import to_number

ROOT = Path(__file__).resolve().parents[1]


def value_of(name: str, body: str) -> float | None:
    """The value the metric pattern reads from a line body (None: no match or no value)."""
    match = re2.compile(metric_regex(name)).search(body)
    if match is None or match.group("value") is None:
        return None
    return to_number(match.group("value"))


# (quantity, line body, value read) - one line per print shape and framework format.
SHAPES = [
    ("loss", "iteration=865 loss=2.6134 lr=3e-4", 2.6134),  # key=value
    (
        "loss",
        "Epoch 0:   6%| 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, v_num=95nc]",
        2.6,
    ),
    ("loss", "epoch: 3451 loss: nan", math.nan),  # key: value, non-finite
    ("loss", "2020-12-21 19:00:28.049095: train loss : 1.3331", 1.3331),  # key : value
    ("loss", "| epoch 008 | loss 6.326 | nll_loss 5.193 | ppl 36.58 | wps 12876", 6.326),  # pipes
    (
        "loss",
        "{'loss': 2.119, 'grad_norm': 37.65, 'learning_rate': 4.58e-05, 'epoch': 0.25}",
        2.119,
    ),
    ("loss", '{"epoch": 10, "loss": "3.180", "nll_loss": "1.417", "ppl": "2.67"}', 3.18),  # JSON
    ("loss", "Train: [30/300][210/2859]\teta 0:25:26 lr 0.000872\tloss 1.9993 (1.9758)", 1.9993),
    (
        "loss",
        " iteration       20/ 1000000 | consumed samples:           80 | lm loss: 1.005022E+01 |",
        10.05022,
    ),  # Megatron-LM
    ("loss", "Iter(train) [ 510/2046]  lr: 1.7590e-04  time: 22.5450  loss: 0.6919", 0.6919),
    ("loss", "step: 10  loss:  7.8935  grad_norm:  1.2345  memory: 31.20GiB(39.38%)", 7.8935),
    ("loss", "Loss is Infinity. Current learning rate is 0.0462", math.inf),  # prose
    ("loss", "lm loss value: NAN | lm loss PPL: NAN |", math.nan),
    ("grad_norm", "| learning rate: 2.999E-04 | loss scale: 1.0 | grad norm: nan |", math.nan),
    ("grad_norm", "lr=8.90889e-05, gnorm=1.543, clip=0%, oom=0, loss_scale=2.000", 1.543),
    ("grad_norm", "loss: 6.5993 (6.5971)  grad_norm: 0.3922 (nan)  time: 0.4944", 0.3922),
    ("loss_scale", "| lm loss: 1.4E+00 | loss scale: 32768.0 | grad norm: 13.636 |", 32768.0),
    ("loss_scale", "gnorm=1.543, clip=0%, oom=0, loss_scale=2.000, wall=882", 2.0),
    ("loss_scale", '"gnorm": "0.264", "clip": "100%", "loss_scale": "4.000", "wall": 9927}', 4.0),
    ("lr", "Iter [200/21600]\tlr: 9.998e-03, eta: 1:05:45, time: 0.141", 9.998e-03),
    ("lr", "{'loss': 1.6462, 'learning_rate': 4.166666666666667e-05, 'epoch': 0.5}", 4.1666e-05),
    (
        "lr",
        "| consumed samples: 43408 | learning rate: 2.999E-04 | global batch size: 8 |",
        2.999e-4,
    ),
]


@pytest.mark.parametrize(("name", "body", "expected"), SHAPES)
def test_each_print_shape_reads_the_value(name: str, body: str, expected: float) -> None:
    got = value_of(name, body)
    assert got is not None, body
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("loss", "val_loss: 0.5469 - val_top_k_categorical_accuracy: 1.0000"),  # prefixed key
        ("loss", "| epoch 010 | valid on 'valid' subset | valid loss 1.94 | valid ppl 3.83"),
        ("loss", "eval loss: 2.04"),
        ("loss", "decode.loss_ce: 1.2669, decode.acc_seg: 11.8965"),  # a longer name
        ("loss", "loss_rpn_cls: 0.2045, loss_rpn_bbox: 0.0280"),
        ("loss", "the loss scale is being reduced"),  # the word without a number
        ("loss", "Loss function: CrossEntropyLoss"),
        ("grad_norm", "clip_grad_norm_ is deprecated"),
        ("loss_scale", "Attempted loss scale: 65536, reducing to 32768"),  # not a logged scale
    ],
)
def test_other_names_and_words_give_no_value(name: str, body: str) -> None:
    if name == "loss_scale" and "Attempted" in body:
        # "Attempted loss scale: N" is DeepSpeed's overflow line: it names a scale too, and the
        # loss-scale rules read it through their own matcher; the vocabulary reads the number.
        assert value_of(name, body) == 65536
        return
    assert value_of(name, body) is None, body


def test_the_first_number_of_a_line_is_read() -> None:
    # A training loss before the validation loss of the same line is the one read.
    body = "1719/1719 [====] - 4s 2ms/step - loss: 1.0187 - accuracy: 0.68 - val_loss: 0.5207"
    assert value_of("loss", body) == pytest.approx(1.0187)


def test_schema_names_the_vocabulary() -> None:
    schema = json.loads((ROOT / "schemas" / "rule.schema.json").read_text())
    metric = schema["properties"]["matchers"]["additionalProperties"]["properties"]["metric"]
    assert tuple(metric["enum"]) == metric_names() == tuple(VOCABULARY)


def test_metric_matcher_round_trips_through_the_bundle_form() -> None:
    matcher = matcher_from_yaml({"metric": "grad_norm"})
    assert isinstance(matcher, MetricMatcher)
    assert matcher.values == {"value": "number"}
    again = MetricMatcher.from_dict(matcher.to_dict())
    assert isinstance(again, MetricMatcher)
    assert (again.metric, again.regex, dict(again.values)) == (
        "grad_norm",
        metric_regex("grad_norm"),
        {"value": "number"},
    )


def test_nonfinite_pattern_matches_only_nan_and_inf() -> None:
    pattern = re2.compile(metric_regex("loss", nonfinite=True))
    assert pattern.search("Epoch 4 | Batch 1210/2400 | Loss : NaN | LR : 1.0e-04") is not None
    assert pattern.search("{'loss': inf, 'grad_norm': nan}") is not None
    assert pattern.search("Loss : 0.5123 | nan_steps : 0 | inf_grads : 0") is None
    assert pattern.search("2020-12-21 19:01:06.033320: validation loss: 1.1733") is None
    # every match counts, so a non-finite held-out loss is one too
    assert pattern.search("Epoch 12 | val loss nan | val acc 0.000") is not None


@pytest.mark.parametrize(
    ("name", "body"),
    [("loss_scale", "image scale: 0.5, crop: 224"), ("grad_norm", "weight norm: 3.2")],
)
def test_a_key_needs_its_qualifier(name: str, body: str) -> None:
    assert value_of(name, body) is None


@pytest.mark.parametrize(("name", "word"), [("loss", "loss"), ("grad_norm", "norm")])
def test_the_prefilter_needs_only_the_quantitys_word(name: str, word: str) -> None:
    # Common prefix words (train, total, value) would make most lines of a log candidates.
    assert required_literals(metric_regex(name)) == ([word], True)
