"""autograd-backward-twice: the detached truncated-BPTT loop trains where the carried state fails, and one
backward over summed losses gives the trunk the gradients of two retained backward calls."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "autograd-backward-twice"
MESSAGE = "Trying to backward through the graph a second time"


def test_the_detached_state_trains_every_batch(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]")
    checks = "\nassert all(h.grad_fn is None for h in (t.detach() for t in hidden))\nassert hidden[0].grad_fn is not None\n"
    result = run(code + checks, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "trained 5 batches" in result.stdout


def test_without_the_detach_the_second_batch_fails(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[0]").replace(
        "hidden = tuple(h.detach() for h in hidden)", "pass"
    )
    result = run(code, tmp_path, timeout=300)
    assert result.returncode != 0
    assert MESSAGE in result.output


def test_one_backward_equals_two_retained_ones(tmp_path: Path) -> None:
    code = example(ENTRY, "code_examples[1]")
    # the claim in fallback.cost, on the example's model: one summed backward equals two calls with the
    # first retaining the graph, and without retain_graph the second call fails
    two_calls = """
import torch
torch.manual_seed(0)
trunk, head_a, head_b = torch.nn.Linear(6, 12), torch.nn.Linear(12, 1), torch.nn.Linear(12, 3)
x = torch.randn(16, 6)
labels = torch.randint(0, 3, (16,))
features = torch.relu(trunk(x))
loss_a = head_a(features).pow(2).mean()
loss_b = torch.nn.functional.cross_entropy(head_b(features), labels)
(loss_a + 0.5 * loss_b).backward()
summed = trunk.weight.grad.clone()
trunk.weight.grad = None
features = torch.relu(trunk(x))
loss_a = head_a(features).pow(2).mean()
loss_b = torch.nn.functional.cross_entropy(head_b(features), labels)
loss_a.backward()
try:
    (0.5 * loss_b).backward()
    raise SystemExit("second backward did not fail")
except RuntimeError as err:
    assert "backward through the graph a second time" in str(err)
trunk.weight.grad = None
features = torch.relu(trunk(x))
loss_a = head_a(features).pow(2).mean()
loss_b = torch.nn.functional.cross_entropy(head_b(features), labels)
loss_a.backward(retain_graph=True)
(0.5 * loss_b).backward()
assert torch.allclose(summed, trunk.weight.grad, atol=1e-6)
print("equal")
"""
    result = run(code, tmp_path, timeout=300)
    assert result.returncode == 0, result.output
    assert "trunk grad norm" in result.stdout
    reference = run(two_calls, tmp_path, name="two_calls.py", timeout=300)
    assert reference.returncode == 0, reference.output
    assert "equal" in reference.stdout
