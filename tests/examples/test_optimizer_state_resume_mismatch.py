"""optimizer-state-resume-mismatch: resuming with one more trainable layer restores the saved
layout's optimizer state and gives the new layer a fresh group."""

from __future__ import annotations

from pathlib import Path

from tests.examples.harness import example, run

ENTRY = "optimizer-state-resume-mismatch"


def test_resume_with_a_newly_unfrozen_layer(tmp_path: Path) -> None:
    driver = """
def build(unfreeze):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[1].requires_grad_(unfreeze)
    return model
model = build(False)
opt = torch.optim.AdamW([p for _, p in trainable(model)], lr=1e-3)
model(torch.randn(8, 4)).sum().backward(); opt.step()
saved = {k: v["exp_avg"].clone() for k, v in opt.state_dict()["state"].items()}
save("ckpt.pt", model, opt, step=1)

model2 = build(True)                       # resumed with the head unfrozen
opt2, step = resume("ckpt.pt", model2, lr=1e-3)
assert step == 1 and len(opt2.param_groups) == 2
assert opt2.param_groups[1]["params"] == list(model2[1].parameters())
state = opt2.state_dict()["state"]
assert all(torch.equal(state[k]["exp_avg"], v) for k, v in saved.items())
model2(torch.randn(8, 4)).sum().backward(); opt2.step()      # and it trains on
print("resumed")
"""
    result = run(example(ENTRY, "code_examples[0]") + driver, tmp_path)
    assert result.returncode == 0, result.output
    assert "resumed" in result.stdout
