"""The rule language: what a rule (rules/*.yaml) may say and what it means.

The modules, each one job:

- `model`: loading and validating rule files into the normalised form stored in a bundle,
  every problem located at file:line:col;
- `condition` (with its nodes in `condition_nodes`): the condition grammar, its parser and its
  evaluation over a `Context`;
- `registry`: every kind of detector, its inputs, settings, defaults and outputs, in one table;
- `units`: the units captured values are normalised by;
- `regexes`: the RE2 pattern dialect: compile errors, and what a pattern provably requires
  (its literals, whether it tells digits apart);
- `regex_internals`: the one place that reaches into the regex libraries' private names;
- `tracebacks`: the lines a traceback is made of, and what a `traceback` matcher's frame specs
  and exception types match.

Nothing here reads a log: the runtime is `trainwreck.engine`, and compiling rules into a bundle
and a wheel is the `trainwreck.compile` stage.
"""
