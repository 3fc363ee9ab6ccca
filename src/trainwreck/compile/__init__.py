"""The compile stage: rules into a bundle and a rule-pack wheel, and how diagnose finds packs.

The modules, each one job:

- `command`: `trainwreck compile` (`compile_pack`, `CompileOptions`, `CompileResult`): validate
  every rule, run its regression logs, write the bundle and the wheel;
- `regression`: a rule's own tests, its regression logs and its examples, run through the engine;
- `bundle`: the bundle (the contract with installed rule packs) and the entry summaries in it;
- `packs`: the rule set diagnose runs: `--rules`, the checkout compiled in memory (cached),
  and every installed rule pack;
- `wheel`: the rule pack written as a wheel with the standard library only.
"""
