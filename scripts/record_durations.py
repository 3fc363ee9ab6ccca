"""Write notebooks/durations.json from the last build's manifest.

    python scripts/record_durations.py [build/manifest.json]

The build's progress line estimates the time left from each notebook's duration in the last run
(build/manifest.json). A fresh clone has no manifest, so it falls back to this committed file:
the durations of the last full run on the machine it names. Refresh it after a full
`trainwreck build` when notebooks were added or became slower or faster.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    manifest_path = Path(argv[0]) if argv else ROOT / "build" / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"record_durations: {manifest_path}: {exc}", file=sys.stderr)
        return 1
    durations: dict[str, float] = {}
    cpus: set[str] = set()
    for record in manifest.get("notebooks", []):
        seconds = record.get("duration_s")
        if record.get("device") == "cpu" and isinstance(seconds, (int, float)) and seconds > 0:
            durations[record["id"]] = round(float(seconds), 1)
            cpus.add(str((record.get("host") or {}).get("cpu")))
    out = {
        "about": "each CPU notebook's duration in its last run at CI scale, for the build's "
        "estimate on a clone with no build/manifest.json (scripts/record_durations.py)",
        "host": ", ".join(sorted(cpus)),
        "durations_s": dict(sorted(durations.items())),
    }
    target = ROOT / "notebooks" / "durations.json"
    target.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{target.relative_to(ROOT)}: {len(durations)} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
