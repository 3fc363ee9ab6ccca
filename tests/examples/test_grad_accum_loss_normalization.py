"""grad-accum-loss-normalization: token-normalised accumulation gives the update of one large batch,
on one process and on two DDP ranks, and the Trainer passes the accumulated token count to
compute_loss_func."""

from __future__ import annotations

import re
from pathlib import Path

from tests.examples.harness import example, inside, run, run_ranks

ENTRY = "grad-accum-loss-normalization"

# A tiny language model and micro-batches with different numbers of real (not -100) labels, and
# the reference: one step of SGD(lr=1) on all the tokens at once, normalised by their count.
SETUP = """
import torch, torch.nn.functional as F
torch.manual_seed(0)
VOCAB = 11
def build():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
def micro_batch(seed, real):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, 6), generator=g)
    labels = torch.randint(0, VOCAB, (2, 6), generator=g)
    labels.view(-1)[real:] = -100                   # padding: only `real` tokens count
    return {"input_ids": ids, "labels": labels}
def reference(batches):
    model = build(); opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ids = torch.cat([b["input_ids"] for b in batches]); labels = torch.cat([b["labels"] for b in batches])
    loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    (loss / (labels != -100).sum()).backward(); opt.step()
    return model
def same(a, b):
    return all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a.parameters(), b.parameters()))
"""


def test_train_step_equals_one_large_batch(tmp_path: Path) -> None:
    driver = """
batches = [micro_batch(1, 12), micro_batch(2, 3), micro_batch(3, 7)]
model = build(); opt = torch.optim.SGD(model.parameters(), lr=1.0)
train_step(model, opt, batches)
assert same(model, reference(batches)), "accumulated update differs from the large batch"
print("equal")
"""
    result = run(SETUP + example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "equal" in result.stdout


def test_train_step_on_two_ddp_ranks_equals_one_large_batch(tmp_path: Path) -> None:
    driver = """
import datetime
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
per_rank = [[micro_batch(1, 12), micro_batch(2, 3)], [micro_batch(3, 7), micro_batch(4, 1)]]
model = torch.nn.parallel.DistributedDataParallel(build())
opt = torch.optim.SGD(model.parameters(), lr=1.0)
train_step(model, opt, per_rank[rank])
assert same(model.module, reference(per_rank[0] + per_rank[1])), "differs from the large batch"
print("equal")
dist.destroy_process_group()
"""
    results = run_ranks(SETUP + example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert all(r.returncode == 0 for r in results), [r.output for r in results]
    assert all("equal" in r.stdout for r in results)


def test_the_fix_logs_the_large_batch_loss(tmp_path: Path) -> None:
    code = SETUP + inside(
        example(ENTRY, "fix.primary.steps[0]"),
        """
from types import SimpleNamespace
batches = [micro_batch(1, 12), micro_batch(2, 3), micro_batch(3, 7)]
it, k = iter(batches), len(batches)
net = build()
model = lambda ids: SimpleNamespace(logits=net(ids))   # a Transformers-style output
opt = torch.optim.SGD(net.parameters(), lr=1.0)
FRAGMENT
assert same(net, reference(batches))
ids = torch.cat([b["input_ids"] for b in batches]); labels = torch.cat([b["labels"] for b in batches])
full = F.cross_entropy(build()(ids).flatten(0, 1), labels.flatten(), ignore_index=-100)
assert abs(logged - full.item()) < 1e-5, (logged, full.item())
print("equal")
""",
    )
    result = run(code, tmp_path)
    assert result.returncode == 0, result.output


def test_the_trainer_passes_the_accumulated_token_count(tmp_path: Path) -> None:
    prelude = """
import torch, torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
ds = []
for i in range(4):
    ids = torch.randint(0, 32, (8,))
    labels = ids.clone(); labels[: 1 + i] = -100          # 7, 6, 5, 4 real targets after the shift
    ds.append({"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long), "labels": labels})
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=2,
                         max_steps=1, use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                         average_tokens_across_devices=False)
"""
    driver = """
seen = []
def recording(outputs, labels, num_items_in_batch=None):
    seen.append(int(num_items_in_batch))
    return compute_loss_func(outputs, labels, num_items_in_batch)
trainer.compute_loss_func = recording
trainer.train()
print("num_items_in_batch", seen)
"""
    result = run(prelude + example(ENTRY, "code_examples[1]") + driver, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    seen = re.search(r"num_items_in_batch \[(.*)\]", result.stdout)
    assert seen, result.output
    # both micro-batches of the one optimizer step get the count of the whole step
    assert [int(x) for x in seen.group(1).split(",")] == [22, 22], result.output
