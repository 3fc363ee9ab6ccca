"""state-dict-key-mismatch: saving through the wrappers stores plain names, and loading strips the
wrapper prefixes of old checkpoints while a real mismatch still raises."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "state-dict-key-mismatch"


def test_wrapper_prefixes_never_reach_the_names(tmp_path: Path) -> None:
    driver = """
def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
model = net(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
for wrapped in (torch.nn.DataParallel(model), torch.compile(model)):
    assert any(k.startswith(("module.", "_orig_mod.")) for k in wrapped.state_dict())
    save(wrapped, opt, 1, "ckpt.pt")
    assert list(torch.load("ckpt.pt", weights_only=True)["model"]) == list(net().state_dict())
torch.save({"model": torch.nn.DataParallel(model).state_dict()}, "old.pt")   # an old checkpoint
fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
load_weights(fresh, "old.pt")
assert torch.equal(fresh[0].weight, model[0].weight)
try:
    load_weights(torch.nn.Sequential(torch.nn.Linear(4, 4)), "old.pt")
except RuntimeError as e:
    print("mismatch raises:", "Unexpected key(s)" in str(e))
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "mismatch raises: True" in result.stdout
