"""The README as a user meets it: short, its quickstart runs as written, and what it links exists.

The quickstart is the first ```python block under the "## Quickstart" heading; it is run as a
script in a fresh interpreter with KILN_INTERPRET=1 (no GPU needed) and KILN_DAEMON=off (no
daemon left behind), as the README says it runs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 200


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def quickstart_code() -> str:
    match = re.search(r"^```python[ \t]*\n(.*?)^```", _section(_readme(), "Quickstart"), re.M | re.S)
    assert match, "the Quickstart section of README.md has no ```python block"
    return match.group(1)


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)}


def test_readme_is_short():
    lines = _readme().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES}"


def test_quickstart_runs_as_written(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart_code(), encoding="utf-8")
    env = dict(os.environ, KILN_INTERPRET="1", KILN_DAEMON="off", KILN_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("KILN_DROPIN", None)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the quickstart failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert "vector add: ok" in proc.stdout


def test_linked_docs_and_results_exist():
    text = _readme()
    paths = set(re.findall(r"(?<![\w/.])((?:docs|bench/results)/[\w.\-/]*)", text))
    assert any(p.startswith("docs/") for p in paths), "README.md links nothing under docs/"
    assert any(p.startswith("bench/results/") and p != "bench/results/" for p in paths), \
        "README.md names no bench/results/ file"
    missing = sorted(p for p in paths if not (ROOT / p.rstrip(".")).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_link_anchors_exist():
    """Every `file.md#anchor` link in the README and in docs/ points at a heading of that file."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text(encoding="utf-8")):
            linked = (page.parent / target).resolve() if target else page
            if not linked.exists() or anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, f"links to missing headings: {broken}"


def test_the_cluster_section_says_what_the_shared_tier_trusts_and_how_to_set_its_key():
    """Issue 34: a Redis writer without the key cannot plant binaries; the key's holders and the node
    cache's writers can; how to make and set the key."""
    cluster = " ".join(_section(_readme(), "A cluster").split())
    for words in ("KILN_REMOTE_CACHE_KEY_FILE", "chmod 600", "secrets.token_hex(32)", "HMAC",
                  "a Redis writer without it", "cannot have a node serve anything no node stored",
                  "without a key the tier is off", "can plant binaries"):
        assert words in cluster, f"README's cluster section no longer says {words!r}"
