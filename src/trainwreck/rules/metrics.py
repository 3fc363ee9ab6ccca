"""The metric vocabulary of the rule language: named training numbers in any framework's print.

A `metric` matcher names a quantity of this table (`metric: loss`) instead of writing a regex
for one framework's line format. Its pattern is built here, once, from the quantity's aliases and
the print shapes every framework uses, so a rule (the NaN-loss and loss-scale rules today) reads
the same number from a user's `print`, the Hugging Face Trainer, Megatron-LM, DeepSpeed, Lightning,
fairseq, mmengine or torchtitan:

- `key=value` (fairseq, tqdm and Lightning postfixes: `loss=2.61, v_num=3`),
- `key: value` and `key : value` (Megatron-LM `lm loss: 1.0E+01 |`, mmengine `loss: 0.6919`,
  torchtitan `loss:  7.8935`, nnU-Net `train loss : 1.3331`),
- `key value` in pipe tables and tab-separated prints (`| loss 6.326 | ppl 36.58 |`,
  `loss 1.9993 (1.9758)`), and `key is value` in prose,
- dict and JSON prints, quoted keys and quoted values (`{'loss': 2.119}`, `{"loss": "3.180"}`).

The value is a number (`2`, `-0.5`, `1.0E-04`) or a non-finite one (`nan`, `inf`, `-inf`,
`Infinity`, any case); it is captured as `value` and read as a number. A key is matched as a whole
word: `val_loss`, `nll_loss` and `loss_ce` are not `loss`, and a held-out loss written as two
words (`valid loss 1.94`, `eval loss: 2.0`) matches without a value, so no series or comparison
reads it. One match per line: the first named number of the quantity on it. With
`nonfinite: true` only a nan or inf value matches, held-out keys included.

The compiled bundle stores the built pattern beside the name, so the engine never needs this table.
Every match is recorded: a series read from a quantity that progress bars and throughput chatter
print on most lines (loss, grad norm) costs a record per line, which is why loss-spike keeps its
step-anchored patterns for those series (benchmarks/bench_diagnose.py, sparse case).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Quantity -> the keys that name it (lower case; a space stands for one space or underscore).
VOCABULARY: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "loss": (
            "loss",
            "losses",
            "total loss",
            "loss total",
            "train loss",
            "train/loss",
            "training loss",
            "lm loss",
            "reduced train loss",
            "loss value",
        ),
        "lr": ("lr", "learning rate", "learning_rate", "current learning rate"),
        "grad_norm": ("grad norm", "gnorm", "gradnorm", "gradient norm", "grad 2.0 norm total"),
        "loss_scale": ("loss scale", "grad scale", "scaler scale", "cur scale"),
    }
)

# Keys of a held-out split written before a quantity's key with a space or underscore.
HELD_OUT = ("val", "valid", "validation", "eval", "test", "dev")

_NONFINITE = r"[-+]?(?:nan|inf(?:inity)?)"
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|" + _NONFINITE
# What may stand before a key: the start of the body or a character that cannot be part of a name.
_BEFORE = r"(?:^|[^a-z0-9_./])"
# Between the key and the value: an optional quote and unit in parentheses, then `:`, `=`, `is` or
# whitespace, then an optional quote.
_BETWEEN = r"""["']?(?:\s*\([a-z/]+\))?\s*(?:[:=]\s*|is\s+|\s+)["']?"""
# After the value: anything but a letter or digit (the number itself is matched greedily).
_AFTER = r"(?:[^a-z0-9]|$)"


def _escaped(text: str) -> str:
    return text.replace(".", r"\.").replace(" ", "[ _]")


def _alternation(keys: tuple[str, ...]) -> str:
    """The keys as one pattern around the word they all hold (the quantity's last word: loss,
    norm, scale), so the literal prefilter finds candidate lines by that word alone and not by
    common words of the prefixes (train, total, value). It reads a few more combinations than the
    table lists (`train loss value`), never a key without the word."""
    word = _anchor(keys)
    if word is None:
        return "|".join(_escaped(key) for key in keys)
    heads = sorted({key[: key.rindex(word)] for key in keys}, key=len, reverse=True)
    tails = sorted({key[key.rindex(word) + len(word) :] for key in keys}, key=len, reverse=True)
    head = "|".join(_escaped(h) for h in heads if h)
    tail = "|".join(_escaped(t) for t in tails if t)
    head_part = f"(?:{head})" + ("?" if "" in heads else "") if head else ""
    tail_part = f"(?:{tail})" + ("?" if "" in tails else "") if tail else ""
    return f"{head_part}{_escaped(word)}{tail_part}"


def _anchor(keys: tuple[str, ...]) -> str | None:
    """The last word of the first key when every key holds it, else None."""
    word = keys[0].replace("/", " ").split()[-1]
    return word if all(word in key for key in keys) else None


def metric_names() -> tuple[str, ...]:
    return tuple(VOCABULARY)


def metric_regex(name: str, nonfinite: bool = False) -> str:
    """The RE2 pattern of quantity `name`: the value as capture `value` (KeyError if unknown);
    with `nonfinite`, only a nan or inf value matches (a NaN is never greater or smaller than a
    number, so a condition cannot ask for one)."""
    keys = _alternation(VOCABULARY[name])
    if nonfinite:
        # Every match counts here, so no branch for held-out keys: a nan validation loss is
        # a nan loss too (the run's weights are already non-finite, or its data is empty).
        return f"(?i){_BEFORE}[\"']?(?:{keys}){_BETWEEN}(?P<value>{_NONFINITE}){_AFTER}"
    held_out = "|".join(HELD_OUT)
    return (
        f"(?i){_BEFORE}[\"']?(?:(?:{held_out})[ _](?:{keys})[\"']?\\s*[:=]?|"
        f"(?:{keys}){_BETWEEN}(?P<value>{_NUMBER}){_AFTER})"
    )
