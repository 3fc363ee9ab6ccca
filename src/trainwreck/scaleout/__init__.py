"""Scale-out: diagnosing the logs of a large job in pieces that merge to the serial answer.

- `trainwreck.engine.partial`: the scan state of a subset of the inputs, written to and read from
  a versioned file (no pickle), merged in input order;
- `cluster`: the scan as Dask tasks (the `dask` extra, imported only when `--dask` is given);
- `command`: `trainwreck merge STATE...`, the report of several saved states;
- `synthetic`: per-rank logs of a job whose one rank fails first (tests and the benchmark).
"""
