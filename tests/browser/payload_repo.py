"""A repository whose contributed text is hostile everywhere, for the site's XSS tests.

Every text field of an entry, a rule's title, description and matcher values, a rule file name,
a notebook's markdown cell and its executed outputs (an SVG and an HTML output with scripts, a
"PNG" that is HTML) carry markup that, if it ever ran, would request `/pwned/<field>-<vector>`
from the server and set `window.PWNED`. The site is built from it with the site functions
directly: `trainwreck check` refuses these files, and the site must be safe even so.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.browser.fixture_repo import HARDWARE, STRAGGLER, make_repo, notebook, png_bytes

ENTRY_ID = "demo-straggler"
MARK = "/pwned/"
# Keys whose values are not free text (enums, ids, dates, paths) or are checked separately.
NOT_TEXT = {
    "id", "category", "severity", "status", "created", "updated", "notebook", "device",
    "relation", "kind", "framework", "rules", "tags", "url", "language",
}  # fmt: skip


def hit(name: str) -> str:
    return f"fetch('{MARK}{name}');window.PWNED='{name}'"


def payload(field: str) -> str:
    """Every vector at once: raw HTML, event handlers, script links, attribute lists."""
    return (
        f"<script>{hit(field + '-script')}</script> "
        f'<img src=x onerror="{hit(field + "-img")}"> '
        f"<svg/onload={hit(field + '-svg')}> "
        f"<details open ontoggle={hit(field + '-details')}></details> "
        f"[a link](javascript:{hit(field + '-link')}) "
        f"[b link](JaVaScRiPt&#58;{hit(field + '-entity-link')}) "
        "[c link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) "
        f"![an image](javascript:{hit(field + '-image')}) "
        f'`code`{{: onclick="{hit(field + "-inline-attr")}" }} '
        f'tail {{: onmouseover="{hit(field + "-attr")}" }}'
    )


def block_payload(field: str) -> str:
    """The vectors again, plus a block attribute list and an md_in_html block."""
    return (
        f"{payload(field)}\n\n"
        f'A paragraph.\n{{: onmouseover="{hit(field + "-block-attr")}" }}\n\n'
        f'<div markdown="1" onmouseover="{hit(field + "-md-in-html")}">*x*</div>\n'
    )


BLOCK_FIELDS = {"summary", "mechanism", "a", "note", "description"}


def _poison(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: v if k in NOT_TEXT else _poison(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(item, key) for item in value]
    if isinstance(value, str):
        return f"{value} {(block_payload if key in BLOCK_FIELDS else payload)(key)}"
    return value


def hostile_entry() -> dict[str, Any]:
    data = yaml.safe_load(STRAGGLER)
    poisoned = _poison(copy.deepcopy(data))
    poisoned["title"] = (
        f"Demo straggler <script>{hit('title')}</script><img src=x onerror={hit('title-img')}>"
    )
    # The first sentence of the summary becomes the page's <meta name="description">.
    poisoned["summary"] = f'"><script>{hit("description")}</script> ' + poisoned["summary"]
    poisoned["tags"] = ["straggler", f'x"><script>{hit("tag")}</script>']
    poisoned["references"].append(
        {
            "title": "A reference",
            "url": f"https://a.com/)<svg/onload={hit('url')}//x>",
            "kind": "blog",
        }
    )
    poisoned["references"].append(
        {"title": "Another", "url": f"javascript:{hit('url-scheme')}", "kind": "blog"}
    )
    poisoned["confirm"][0]["language"] = f"bash {{onclick={hit('language')}}}"
    # The fact check's block, with the digest of the content so the page shows it as current:
    # its date then reaches the badge and the admonition title too.
    from trainwreck.knowledge.checked import content_digest

    poisoned["checked"] = {
        "date": f'2026-12-01" onmouseover="{hit("checked-date-attr")}" <script>{hit("checked-date")}</script>',
        "by": payload("checked-by"),
        "ledger": f"docs/audits/../../x<script>{hit('checked-ledger')}</script>.md",
        "claims": {"checked": 3, "held": 2, "corrected": 1, "unconfirmed": 0},
        "against": [payload("checked-against")],
        "not_verified": [payload("checked-not_verified")],
        "digest": content_digest(poisoned),
    }
    return poisoned


HOSTILE_RULE = {
    "id": "demo-straggler-steps",
    "entry": ENTRY_ID,
    "title": f"Steps <script>{hit('rule-title')}</script>",
    "description": block_payload("rule-description"),
    "confidence": 0.6,
    "matchers": {
        "step": {"regex": f"step (?P<step>\\d+) <script>{hit('rule-regex')}</script>"},
        "event": {"json": {"kind": f"<img src=x onerror={hit('rule-json')}>"}},
    },
    "detectors": {"stalls": {"threshold": {"series": f"<b onclick={hit('rule-detector')}>x</b>"}}},
    "condition": "stalls",
}
# A rule file named like markup (it is shown as the rule's source).
HOSTILE_RULE_FILE = "r<img src=x onerror=window.PWNED=1>.yaml"


def hostile_notebook() -> dict[str, Any]:
    data = notebook()
    data["cells"][0]["source"] = f"# Demo <script>{hit('nb-heading')}</script>\n\n" + block_payload(
        "nb-markdown"
    )
    return data


def hostile_outputs() -> list[dict[str, Any]]:
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" '
        f'onload="{hit("svg-output-onload")}"><script>{hit("svg-output-script")}</script>'
        '<rect width="10" height="10" fill="orange"/></svg>'
    )
    html_output = f"<script>{hit('html-output')}</script><b>rich</b>"
    fake_png = base64.b64encode(f"<script>{hit('png-output')}</script>".encode()).decode()
    return [
        {"output_type": "display_data", "metadata": {}, "data": {"image/svg+xml": svg}},
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"text/html": html_output, "text/plain": "<rich output>"},
        },
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": fake_png}},
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"image/png": base64.b64encode(png_bytes()).decode()},
        },
    ]


def make_payload_repo(root: Path) -> Path:
    """The demo repository with the straggler entry, its rule and notebook made hostile, and a
    manifest that shows the hostile executed notebook as a run of the current source."""
    from trainwreck import reproduce

    make_repo(root)
    entry = hostile_entry()
    (root / f"entries/{ENTRY_ID}.yaml").write_text(
        "# yaml-language-server: $schema=../schemas/entry.schema.json\n"
        + yaml.safe_dump(entry, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    hardware_entry = yaml.safe_load(HARDWARE)
    hardware_entry["reproduction"]["not_reproducible"] += " " + payload("not_reproducible")
    (root / "entries/demo-hardware.yaml").write_text(
        "# yaml-language-server: $schema=../schemas/entry.schema.json\n"
        + yaml.safe_dump(hardware_entry, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    (root / "rules/demo-straggler-steps.yaml").unlink()
    (root / "rules" / HOSTILE_RULE_FILE).write_text(
        yaml.safe_dump(HOSTILE_RULE, sort_keys=False), encoding="utf-8"
    )
    source = hostile_notebook()
    (root / f"notebooks/{ENTRY_ID}.ipynb").write_text(json.dumps(source, indent=1))
    executed = copy.deepcopy(source)
    executed["cells"][4]["outputs"] = hostile_outputs()
    (root / "build/executed").mkdir(parents=True, exist_ok=True)
    (root / f"build/executed/{ENTRY_ID}.ipynb").write_text(json.dumps(executed))
    # An evidence "figure" that is a document, not an image.
    evidence = root / f"build/evidence/{ENTRY_ID}"
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "plot.html").write_text(f"<script>{hit('evidence-html')}</script>")
    reproduction = entry["reproduction"]
    record = {
        "id": ENTRY_ID,
        "notebook": f"notebooks/{ENTRY_ID}.ipynb",
        "device": "cpu",
        "status": "passed",
        "source_hash": reproduce.source_hash(source, reproduction, "ci"),
        "executed": f"build/executed/{ENTRY_ID}.ipynb",
        "host": {"cpu": f"<img src=x onerror={hit('host')}>", "gpu": None, "driver": None},
        "versions": {"python": "3.11", "torch": "2.13.0", "cuda": None},
        "started": "2026-11-30T01:02:03+00:00",
        "evidence": {"figures": [f"build/evidence/{ENTRY_ID}/plot.html"]},
        "error": None,
    }
    hardware = {
        "id": "demo-fragmentation",
        "notebook": "notebooks/demo-fragmentation.ipynb",
        "device": "gpu",
        "status": "failed",
        "source_hash": "0" * 64,
        "error": {"cell": 1, "message": f"<script>{hit('error-message')}</script>"},
    }
    manifest = {"version": 1, "notebooks": [record, hardware]}
    (root / "build/manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def build_payload_site(root: Path) -> Path:
    """generate_docs + mkdocs build --strict of the hostile repository; returns site/."""
    from trainwreck import site
    from trainwreck.model import load_entries

    make_payload_repo(root)
    entries, problems = load_entries(root)
    assert not problems, problems
    manifest = json.loads((root / "build/manifest.json").read_text())
    rules = site.load_rules(root)
    docs = root / "build/docs"
    pages = site.generate_docs(root, docs, entries, manifest, rules)
    site.run_mkdocs(root, docs, root / "site", pages.nav)
    return root / "site"
