"""Tracebacks read as one unit: each shape the parser reads (engine/tracebacks.py), the
`traceback` matcher's semantics through the engine, the lowered confidence of a finding that
rests on a cut traceback and its wording in every report format, validation at file:line:col,
and the same results in a file scanned in parts and in saved states merged."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from trainwreck import engine as eng
from trainwreck import formats
from trainwreck.compile.packs import RuleSet
from trainwreck.diagnose import diagnose
from trainwreck.engine import parallel, partial, reading
from trainwreck.engine.tracebacks import Unit, parse
from trainwreck.scaleout.command import MergeScanner, PartialScanner

from .test_diagnose_bulk import mixed_log, state_of
from .test_rules_matchers import make_rule, problems_of, write

ROOT = Path(__file__).resolve().parents[1]

SAVE = """Traceback (most recent call last):
  File "/home/u/train.py", line 88, in <module>
    main()
  File "/opt/conda/lib/python3.11/site-packages/torch/serialization.py", line 944, in save
    _save(
  File "/opt/conda/lib/python3.11/site-packages/torch/serialization.py", line 1312, in _save
    zip_file.write_record(name, storage, num_bytes)
"""


def only(units: list[Unit]) -> Unit:
    found = [u for u in units if u.frames]
    assert len(found) == 1, found
    return found[0]


def frames(unit: Unit) -> list[tuple[str | None, str | None]]:
    return [(f.path, f.function) for f in unit.frames]


# --- the parser, shape by shape ------------------------------------------------------------------


def test_a_python_traceback_is_one_unit_with_its_frames_and_exception():
    unit = only(list(parse(SAVE + "RuntimeError: [enforce fail at inline_container.cc:603] x\n")))
    assert frames(unit) == [
        ("/home/u/train.py", "<module>"),
        ("/opt/conda/lib/python3.11/site-packages/torch/serialization.py", "save"),
        ("/opt/conda/lib/python3.11/site-packages/torch/serialization.py", "_save"),
    ]
    assert (unit.exception, unit.message) == (
        "RuntimeError",
        "[enforce fail at inline_container.cc:603] x",
    )
    assert not unit.cut and unit.start == 1


def test_a_traceback_cut_before_its_exception_has_no_type_and_no_message():
    unit = only(list(parse("step 10 loss 2.1\n" + SAVE)))
    assert unit.cut and unit.exception is None and unit.message is None
    assert frames(unit)[-1][1] == "_save"


def test_a_cut_excerpt_without_its_header_opens_on_its_first_frame():
    body = SAVE.split("\n", 1)[1]
    unit = only(list(parse(body + "OSError: [Errno 28] No space left on device\n")))
    assert unit.start == 1 and unit.exception == "OSError" and len(unit.frames) == 3


def test_ranks_interleaved_build_their_own_units():
    lines = []
    for i, line in enumerate(SAVE.splitlines()):
        lines.append(f"[rank0]:{line}")
        if i < 3:
            lines.append(f"[rank1]:{line}")
    lines.append("[rank0]:KeyboardInterrupt")
    units = {u.rank: u for u in parse("\n".join(lines) + "\n")}
    assert units[0].exception == "KeyboardInterrupt" and len(units[0].frames) == 3
    assert units[1].cut and frames(units[1]) == [("/home/u/train.py", "<module>")]


def test_timestamps_in_front_of_every_line_are_tolerated():
    text = "".join(f"2026-12-03T03:12:45.771Z {line}\n" for line in SAVE.splitlines())
    unit = only(list(parse(text)))
    assert len(unit.frames) == 3 and unit.cut


def test_a_rich_boxed_traceback_gives_its_frames():
    text = (
        "╭──────────── Traceback (most recent call last) ────────────╮\n"
        "│ /home/dev/train_accel.py:214 in <module>                  │\n"
        "│                                                           │\n"
        "│ ❱ 214 │   main()                                          │\n"
        "│                                                           │\n"
        "│ /opt/py/site-packages/torch/serialization.py:1312 in _save │\n"
        "╰───────────────────────────────────────────────────────────╯\n"
        "RuntimeError: PytorchStreamWriter failed writing file data/3: file write failed\n"
    )
    unit = only(list(parse(text)))
    assert frames(unit) == [
        ("/home/dev/train_accel.py", "<module>"),
        ("/opt/py/site-packages/torch/serialization.py", "_save"),
    ]
    assert unit.exception == "RuntimeError" and unit.message.startswith("PytorchStreamWriter")


def test_an_ipython_traceback_gives_its_qualified_frames():
    text = (
        "---------------------------------------------------------------------------\n"
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "Cell In[7], line 3\n"
        "      1 model.train()\n"
        "----> 3 out = model(batch)\n"
        "File /opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self, *args, **kwargs)\n"
        "   1500     return forward_call(*args, **kwargs)\n"
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    unit = only(list(parse(text)))
    assert frames(unit) == [
        ("/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", "Module._call_impl")
    ]
    assert unit.exception == "OutOfMemoryError" and not unit.cut


def test_an_ipython7_traceback_gives_its_frames_and_the_headers_type():
    # IPython 7's VerboseTB: `PATH in FUNCTION(ARGS)` frames (the home folder as `~`, spaces
    # in the path), `<ipython-input-N-HASH> in <module>` for a cell, the type in the header.
    text = (
        "---------------------------------------------------------------------------\n"
        "RuntimeError                              Traceback (most recent call last)\n"
        "<ipython-input-4-1f9c2a7e3b10> in <module>\n"
        "      2 loader = make_loader()\n"
        "----> 3 batch = next(iter(loader))\n"
        "\n"
        "~\\My Projects\\seg net\\train.py in fit(self, epochs)\n"
        "     40         for step, batch in enumerate(self.loader):\n"
        "\n"
        "/usr/lib/python3.7/site-packages/torch/utils/data/dataloader.py in __init__(self, loader)\n"
        "    718             w.start()\n"
    )
    unit = only(list(parse(text)))
    assert frames(unit) == [
        ("<ipython-input-4-1f9c2a7e3b10>", "<module>"),
        ("~\\My Projects\\seg net\\train.py", "fit"),
        ("/usr/lib/python3.7/site-packages/torch/utils/data/dataloader.py", "__init__"),
    ]
    # cut before its exception line, but the header said which type it ends in
    assert unit.cut and unit.exception == "RuntimeError" and unit.message is None


def test_an_ipython7_header_type_rules_out_a_matcher_for_another_exception(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE.replace("train.py:<module>", "train.py:main"))
    body = (
        "/home/u/train.py in main()\n"
        "/opt/conda/lib/python3.7/site-packages/torch/serialization.py in _save(obj, zip_file)\n"
    )
    text = "{}                          Traceback (most recent call last)\n" + body
    assert len(fired(rule, write(tmp_path / "a.log", text.format("OSError")))) == 1
    assert fired(rule, write(tmp_path / "b.log", text.format("KeyboardInterrupt"))) == []


def test_faulthandler_stacks_are_a_unit_per_thread():
    # CPython's faulthandler: `File "PATH", line N in FUNCTION` (no comma), one stack per thread.
    text = (
        "Fatal Python error: Segmentation fault\n"
        "\n"
        "Thread 0x00007f3a2effd700 (most recent call first):\n"
        '  File "/usr/lib/python3.10/threading.py", line 320 in wait\n'
        '  File "/usr/lib/python3.10/threading.py", line 1016 in _bootstrap\n'
        "\n"
        "Current thread 0x00007f3b9c4c2740 (most recent call first):\n"
        '  File "/x/torch/utils/data/_utils/collate.py", line 141 in collate\n'
        '  File "/x/torch/utils/data/_utils/worker.py", line 308 in _worker_loop\n'
    )
    units = [u for u in parse(text) if u.frames]
    assert [[f for _, f in frames(u)] for u in units] == [
        ["wait", "_bootstrap"],
        ["collate", "_worker_loop"],
    ]
    assert all(u.cut for u in units)


def test_an_exception_of_an_errors_module_ends_its_traceback():
    text = (
        '  File "/venv/lib/python3.12/site-packages/triton/compiler/compiler.py", line 483, in _init_handles\n'
        '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")\n'
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304\n"
    )
    unit = only(list(parse(text)))
    assert not unit.cut and unit.exception == "triton.runtime.errors.OutOfResources"
    assert unit.message == "out of resource: shared memory, Required: 98304"
    # a usual type name in such a module is read once, by the usual pattern
    other = only(
        list(parse(text.replace("triton.runtime.errors.OutOfResources", "a.errors.XError")))
    )
    assert other.exception == "a.errors.XError" and not other.cut


# rich 15.0.0's Traceback (rich.traceback.Traceback, color_system=None) rendered here at three
# widths, its frame lines kept (code lines left out): at 100 columns the path is folded inside the
# box, at 80 the box's top border is exactly a terminal's width and the function wraps onto a
# line of its own, at 60 the path and the function name are both folded.
RICH_FOLDED = {
    100: (
        "╭─────────────────────────────── Traceback (most recent call last) ────────────────────────────────╮\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_directory_name_for_wrapping_tests/dispat │\n"
        "│ ch.py:4 in _dispatch_fw                                                                          │\n"
        "│                                                                                                  │\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_directory_name_for_wrapping_tests/dispat │\n"
        "│ ch.py:2 in _run_priority_list_with_a_really_long_function_name_for_wrapping                      │\n"
        "╰──────────────────────────────────────────────────────────────────────────────────────────────────╯\n"
    ),
    80: (
        "╭───────────────────── Traceback (most recent call last) ──────────────────────╮\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_directory_name_for_w │\n"
        "│ rapping_tests/dispatch.py:4 in _dispatch_fw                                  │\n"
        "│                                                                              │\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_directory_name_for_w │\n"
        "│ rapping_tests/dispatch.py:2 in                                               │\n"
        "│ _run_priority_list_with_a_really_long_function_name_for_wrapping             │\n"
        "╰──────────────────────────────────────────────────────────────────────────────╯\n"
    ),
    60: (
        "╭─────────── Traceback (most recent call last) ────────────╮\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_ │\n"
        "│ directory_name_for_wrapping_tests/dispatch.py:4 in       │\n"
        "│ _dispatch_fw                                             │\n"
        "│                                                          │\n"
        "│ /tmp/richtest/site-packages/xformers/ops/fmha/very_long_ │\n"
        "│ directory_name_for_wrapping_tests/dispatch.py:2 in       │\n"
        "│ _run_priority_list_with_a_really_long_function_name_for_ │\n"
        "│ wrapping                                                 │\n"
        "╰──────────────────────────────────────────────────────────╯\n"
    ),
}


@pytest.mark.parametrize("width", sorted(RICH_FOLDED))
def test_rich_frames_folded_or_wrapped_inside_the_box_are_joined(width):
    text = RICH_FOLDED[width] + "NotImplementedError: No operator found for `x` with inputs:\n"
    unit = only(list(parse(text)))
    path = (
        "/tmp/richtest/site-packages/xformers/ops/fmha/"
        "very_long_directory_name_for_wrapping_tests/dispatch.py"
    )
    assert frames(unit) == [
        (path, "_dispatch_fw"),
        (path, "_run_priority_list_with_a_really_long_function_name_for_wrapping"),
    ]
    assert unit.exception == "NotImplementedError" and unit.start == 1


def test_a_rich_frame_in_an_ascii_box_gives_its_frame():
    text = (
        "| /opt/py/site-packages/torch/serialization.py:1312 in _save              |\n"
        "RuntimeError: PytorchStreamWriter failed writing file data/3: file write failed\n"
    )
    unit = only(list(parse(text)))
    assert frames(unit) == [("/opt/py/site-packages/torch/serialization.py", "_save")]


def test_old_style_cxx_frames_join_the_exception_they_follow():
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121\n"
        "Exception raised from checkForNCCLErrorsInternal at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1323 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f01 in /usr/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x1b4 (0x7f02 in /usr/lib/libtorch_cuda.so)\n"
    )
    unit = only(list(parse(text)))
    assert unit.exception == "RuntimeError" and not unit.cut
    assert frames(unit)[1:] == [
        ("../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", "checkForNCCLErrorsInternal"),
        ("/usr/lib/libc10.so", "c10::Error::Error"),
        ("/usr/lib/libtorch_cuda.so", "c10d::ProcessGroupNCCL::ncclCommWatchdog"),
    ]


def test_captured_cxx_frames_alone_are_a_cut_unit():
    text = (
        "C++ CapturedTraceback:\n"
        "#5 c10::Error::Error(c10::SourceLocation, std::string) from ??:0\n"
        "#7 at::meta::structured_mm::meta(at::Tensor const&, at::Tensor const& b) from ??:0\n"
        "#13 at::native::_matmul_impl(at::Tensor&, at::Tensor const&) from LinearAlgebra.cpp:0\n"
    )
    unit = only(list(parse(text)))
    assert unit.cut and [f for _, f in frames(unit)] == [
        "c10::Error::Error",
        "at::meta::structured_mm::meta",
        "at::native::_matmul_impl",
    ]
    assert frames(unit)[2][0] == "LinearAlgebra.cpp"


def test_a_cxx_terminate_names_its_exception_type():
    text = (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated\n"
        "frame #0: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x1b4 (0x7f02 in /usr/lib/libtorch_cuda.so)\n"
    )
    unit = only(list(parse(text)))
    assert unit.exception == "c10::DistBackendError" and not unit.cut


def test_a_dataloader_worker_reraise_is_one_unit_ending_in_the_workers_exception():
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        '  File "/x/torch/utils/data/dataloader.py", line 1567, in _process_data\n'
        '  File "/x/torch/_utils.py", line 794, in reraise\n'
        "KeyError: Caught KeyError in DataLoader worker process 3.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/x/torch/utils/data/_utils/worker.py", line 374, in _worker_loop\n'
        '  File "/data/ds.py", line 12, in __getitem__\n'
        "KeyError: 'label'\n"
    )
    unit = only(list(parse(text)))
    assert (unit.worker, unit.exception, unit.message, unit.cut) == (
        3,
        "KeyError",
        "'label'",
        False,
    )
    assert [f for _, f in frames(unit)] == [
        "<module>",
        "_process_data",
        "reraise",
        "_worker_loop",
        "__getitem__",
    ]


def test_a_reraise_cut_inside_the_worker_keeps_the_caught_type():
    text = (
        '  File "/x/torch/_utils.py", line 794, in reraise\n'
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/x/torch/utils/data/_utils/worker.py", line 374, in _worker_loop\n'
    )
    unit = only(list(parse(text)))
    assert unit.cut and unit.exception == "RuntimeError" and unit.message is None
    assert unit.worker == 0


def test_chained_exceptions_are_one_unit_each():
    text = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "ValueError: bad\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "b.py", line 2, in g\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    units = [u for u in parse(text) if u.frames]
    assert [(u.exception, frames(u)) for u in units] == [
        ("ValueError", [("a.py", "f")]),
        ("torch.OutOfMemoryError", [("b.py", "g")]),
    ]


# --- the matcher through the engine --------------------------------------------------------------

SAVE_RULE = """
matchers:
  save:
    traceback:
      frames: ['torch/serialization.py:_save', 'train.py:<module>']
      exception: [RuntimeError, OSError]
      message: 'failed writing file|No space left'
condition: save
"""


def fired(rule: Any, path: Path) -> list[Any]:
    return diagnose([str(path)], rule_set=RuleSet(rules=[rule], entries={})).findings


def test_frames_and_exception_match_at_the_rules_confidence(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    log = write(
        tmp_path / "a.log", "noise\n" + SAVE + "OSError: [Errno 28] No space left on device\n"
    )
    (finding,) = fired(rule, log)
    assert finding.confidence == 0.5 and not any("cut" in n for n in finding.notes)
    # evidence: the first frame that meets a spec and the exception line
    assert [e.line for e in finding.evidence] == [7, 9]


def test_another_exception_or_message_after_the_same_frames_does_not_match(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    for n, last in enumerate(["KeyboardInterrupt", "RuntimeError: some other failure"]):
        assert fired(rule, write(tmp_path / f"b{n}.log", SAVE + last + "\n")) == []


def test_a_missing_frame_does_not_match(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    text = SAVE.replace("train.py", "run.py") + "OSError: [Errno 28] No space left on device\n"
    assert fired(rule, write(tmp_path / "c.log", text)) == []


def test_frames_from_two_tracebacks_do_not_make_one_match(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    first, second = SAVE.splitlines()[:3], SAVE.splitlines()[3:]
    text = "\n".join([*first, "ValueError: x", "Traceback (most recent call last):", *second])
    assert fired(rule, write(tmp_path / "d.log", text + "\n")) == []


def test_a_cut_traceback_matches_on_its_frames_with_lower_confidence_and_says_so(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    log = write(tmp_path / "e.log", "step 1\n" + SAVE)
    report = diagnose([str(log)], rule_set=RuleSet(rules=[rule], entries={}))
    (finding,) = report.findings
    assert finding.confidence == 0.3  # 0.6 of 0.5
    note = "from the frames of a traceback cut before its message"
    assert any(n.startswith(note) and "0.50 lowered to 0.30" in n for n in finding.notes)
    for name in ("text", "markdown", "json"):
        assert note in formats.render(report, name), name
    data = json.loads(formats.render(report, "json"))
    assert data["findings"][0]["confidence"] == 0.3


def test_cut_false_lets_only_a_whole_traceback_match(tmp_path):
    rule = make_rule(
        tmp_path, SAVE_RULE.replace("      message:", "      cut: false\n      message:")
    )
    assert fired(rule, write(tmp_path / "cut.log", "step 1\n" + SAVE)) == []
    whole = write(tmp_path / "whole.log", SAVE + "OSError: [Errno 28] No space left on device\n")
    (finding,) = fired(rule, whole)
    assert finding.confidence == 0.5


def test_a_cut_traceback_beside_a_whole_one_keeps_the_full_confidence(tmp_path):
    rule = make_rule(tmp_path, SAVE_RULE)
    text = (
        SAVE + "RuntimeError: PytorchStreamWriter failed writing file data/0: file write failed\n"
    )
    (finding,) = fired(rule, write(tmp_path / "f.log", text + "step 2\n" + SAVE))
    assert finding.confidence == 0.5 and not any("cut before" in n for n in finding.notes)


def test_a_traceback_longer_than_max_lines_is_judged_on_what_it_reached(tmp_path):
    rule = make_rule(
        tmp_path, SAVE_RULE.replace("      message:", "      max_lines: 5\n      message:")
    )
    lines = SAVE.splitlines()
    text = "\n".join(
        [*lines[:5], *lines[5:], "x", "y", "OSError: [Errno 28] No space left on device"]
    )
    run = eng.Engine([rule]).scan([("g.log", str(write(tmp_path / "g.log", text + "\n")))]).runs[0]
    # lines 6..7 are past the first unit's 5 lines: they open a unit of their own, cut
    assert run.matchers["save"].count == 0


def test_captures_reach_the_condition(tmp_path):
    body = SAVE_RULE.replace("condition: save", 'condition: save and save.exception == "OSError"')
    rule = make_rule(tmp_path, body)
    ok = write(tmp_path / "h.log", SAVE + "OSError: [Errno 28] No space left on device\n")
    other = write(tmp_path / "i.log", SAVE + "RuntimeError: x failed writing file y\n")
    assert len(fired(rule, ok)) == 1 and fired(rule, other) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "frames: ['/abs/path.py:f']",
            "matchers.tb.traceback.frames[0]: frame '/abs/path.py:f' is not PATH:FUNCTION",
        ),
        ("frames: ['a.py:f g']", "is not PATH:FUNCTION"),
        (
            "frames: ['a.py:f']\n      exception: ['Runtime Error']",
            "exception 'Runtime Error' is not an exception type name",
        ),
        ("frames: ['a.py:f']\n      message: '(?=x)'", "matchers.tb.traceback.message"),
        ("frames: []", "matchers.tb"),
    ],
)
def test_bad_traceback_fields_are_problems_at_their_place(tmp_path, spec, message):
    body = f"matchers:\n  tb:\n    traceback:\n      {spec}\ncondition: tb\n"
    found = problems_of(tmp_path, body)
    assert any(message in p for p in found), found
    assert all(re.match(r"rules/t-rule\.yaml:\d+:\d+: ", p) for p in found), found


# --- the same results however the scan is cut ----------------------------------------------------

CUT = (ROOT / "tests/logs/checkpoint-disk-full/cut-traceback-write-record.log").read_text()
WHOLE = (ROOT / "tests/logs/cuda-fork-reinit/cut-traceback-worker-reraise.log").read_text()


@pytest.fixture(scope="module")
def traceback_rules() -> list[Any]:
    from trainwreck.compile.packs import compile_folder

    bundle, _ = compile_folder(ROOT)
    return [
        r for r in bundle.rules if any(m["kind"] == "traceback" for m in r["matchers"].values())
    ]


def test_one_file_in_parts_scans_tracebacks_alike(traceback_rules, monkeypatch, tmp_path):
    monkeypatch.setattr(reading, "BLOCK", 64 << 10)  # several blocks, so several parts
    log = mixed_log(tmp_path / "combined.log", 4000, 7, overlong=False)
    text = log.read_text().splitlines(keepends=True)
    for at in (150, 1200, 2400, 3800):
        text[at] += CUT if at % 2 else WHOLE
    log.write_text("".join(text))
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", log.stat().st_size // 4)
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 3)
    planned: list[Any] = []
    original = parallel.plan_parts
    monkeypatch.setattr(
        parallel, "plan_parts", lambda *a: planned.append(original(*a)) or planned[-1]
    )
    serial = eng.Engine(traceback_rules).scan([(str(log), str(log))], jobs=1)
    assert sum(run.matchers[m].cut for run in serial.runs for m in run.matchers) > 0
    parts = eng.Engine(traceback_rules).scan([(str(log), str(log))], jobs=3)
    assert planned and planned[0] is not None and len(planned[0][1]) == 3, planned
    assert state_of(parts) == state_of(serial)


def test_saved_states_merged_find_what_one_scan_finds(traceback_rules, tmp_path):
    rule_set = RuleSet(rules=traceback_rules, entries={})
    files = []
    for n, text in enumerate([CUT, WHOLE, "step 1\n" + CUT]):
        files.append(str(write(tmp_path / f"rank{n}.log", text)))

    def plain(report: Any) -> dict[str, Any]:
        data = json.loads(formats.render(report, "json"))
        data["stats"].pop("seconds")
        data["stats"].pop("rule_sources")
        return data

    serial = plain(diagnose(files, rule_set=rule_set, jobs=1))
    assert serial["findings"]
    states = []
    for n, name in enumerate(files):
        out = str(tmp_path / f"part{n}{partial.SUFFIX}")
        diagnose([name], rule_set=rule_set, jobs=1, scanner=PartialScanner(out, jobs=1))
        states.append(out)
    merged = plain(diagnose(states, rule_set=rule_set, scanner=MergeScanner()))
    assert merged == serial


def test_cxx_frame_specs_match_on_the_library_and_the_qualified_name(tmp_path):
    body = """
matchers:
  watchdog:
    traceback:
      frames: ['libtorch_cuda.so:ProcessGroupNCCL::ncclCommWatchdog']
      exception: [DistBackendError]
condition: watchdog
"""
    rule = make_rule(tmp_path, body)
    text = (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "frame #0: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x1b4 (0x7f02 in /usr/lib/libtorch_cuda.so)\n"
    )
    assert len(fired(rule, write(tmp_path / "w.log", text))) == 1
    other = text.replace("c10::DistBackendError", "std::bad_alloc")
    assert fired(rule, write(tmp_path / "x.log", other)) == []
