"""`trainwreck export`: the rules as alerting rules for other monitoring stacks.

Modules: `rulefile` (the Prometheus rule-file format both exports write, with the escaping of
names, label values and annotation templates), `loki` (regex rules as LogQL alerts for the Loki
ruler), `prometheus` (the probe's fingerprints as PromQL alerts), `command` (the command line).
Nothing here imports prometheus_client: an export is text generation over the typed rules.
"""
