"""bench/README.md must be exactly what bench/make_readme.py renders from bench/results/*.json (no hand edits)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "make_readme.py"

pytestmark = pytest.mark.skipif(not (ROOT / "bench" / "results").is_dir() or not SCRIPT.exists(),
                                reason="bench/results or bench/make_readme.py not in this checkout")


def make_readme(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_readme_is_generated_from_results():
    r = make_readme("--check")
    assert r.returncode == 0, f"bench/README.md is out of date; run python bench/make_readme.py\n{r.stdout}{r.stderr}"


def test_check_catches_a_hand_edited_table(tmp_path):
    readme = tmp_path / "README.md"
    assert make_readme("--readme", str(readme)).returncode == 0
    assert make_readme("--check", "--readme", str(readme)).returncode == 0
    text = readme.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| minilm6->mpnet | orthogonal |"))
    readme.write_text(text.replace(row, row.replace("0.", "9.", 1), 1))
    r = make_readme("--check", "--readme", str(readme))
    assert r.returncode == 1
    assert "differs" in r.stdout and "-| minilm6->mpnet | orthogonal |" in r.stdout
