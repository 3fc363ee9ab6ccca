"""host-oom-sigkill: the low-memory loads load what was saved, without a second copy, one local
rank at a time."""

from __future__ import annotations

import re
from pathlib import Path

from tests.examples.harness import example, inside, run, run_ranks

ENTRY = "host-oom-sigkill"
SAVE = """
import torch
torch.manual_seed(0)
torch.save(torch.nn.Linear(64, 32).state_dict(), "model.pt")
"""


def test_meta_build_and_mmap_assign_keep_one_copy(tmp_path: Path) -> None:
    run(SAVE, tmp_path, name="save.py")
    code = inside(
        example(ENTRY, "fix.primary.steps[0]"),
        """
import torch
build_model = lambda: torch.nn.Linear(64, 32)
path = "model.pt"
FRAGMENT
saved = torch.load(path, weights_only=True)
assert model.weight.device.type == "cpu" and torch.equal(model.weight, saved["weight"])
# assign=True keeps the loaded tensors: the parameter is the memory-mapped file, not a copy
assert model.weight.data_ptr() == state["weight"].data_ptr()
# ... whose memory lies in this process's mapping of model.pt (Linux /proc/self/maps)
maps = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith("model.pt")]
spans = [tuple(int(x, 16) for x in span.split("-")) for span in maps]
assert any(lo <= model.weight.data_ptr() < hi for lo, hi in spans), (maps, model.weight.data_ptr())
print("one copy")
""",
    )
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output
    assert "one copy" in result.stdout


def test_local_ranks_load_one_after_another(tmp_path: Path) -> None:
    run(SAVE, tmp_path, name="save.py")
    code = inside(
        example(ENTRY, "fix.fallback.steps[0]"),
        """
import datetime, gc, os, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
local_rank, local_world_size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
model, path = torch.nn.Linear(64, 32), "model.pt"
load, spans = torch.load, []
def timed_load(*args, **kwargs):                 # when this rank held the state dict
    start = time.time(); state = load(*args, **kwargs); time.sleep(0.2)
    spans.append((start, time.time())); return state
torch.load = timed_load
FRAGMENT
assert torch.equal(model.weight, load(path, weights_only=True)["weight"])
print("span", local_rank, *spans[0])
dist.destroy_process_group()
""",
    )
    results = run_ranks(code, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    spans = {}
    for r in results:
        rank, start, end = re.search(r"span (\d) (\S+) (\S+)", r.stdout).groups()
        spans[int(rank)] = (float(start), float(end))
    assert spans[0][1] <= spans[1][0], spans  # rank 1 loads only after rank 0 is done


def test_from_pretrained_loads_the_saved_model(tmp_path: Path) -> None:
    save = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained("tiny")
"""
    assert run(save, tmp_path, name="save.py").returncode == 0
    checks = """
import torch
from safetensors.torch import load_file
saved = load_file("tiny/model.safetensors")
assert model.dtype == torch.bfloat16                      # "auto": the dtype the files hold
assert torch.equal(model.model.embed_tokens.weight, saved["model.embed_tokens.weight"])
print("loaded")
"""
    result = run('name = "tiny"\n' + example(ENTRY, "code_examples[1]") + checks, tmp_path)
    assert result.returncode == 0, result.output
