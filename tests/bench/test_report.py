"""bench/provenance.py writes result files with their provenance; bench/report.py renders them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from bench import report
from bench.provenance import save

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_result_file_records_its_provenance(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    out = save(
        "probe",
        topic="ask",
        title="a probe",
        columns=["a", "b"],
        rows=[[1, "2×"]],
        models=[model],
        target="≥ 1×",
        where=tmp_path / "results",
    )
    data = json.loads(out.read_text())
    p = data["provenance"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert p["commit"] == head
    assert isinstance(p["dirty"], bool)
    assert p["models"] == [
        {
            "file": "tiny.gguf",
            "bytes": model.stat().st_size,
            "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        }
    ]
    assert p["machine"]["cores"] and p["machine"]["cpu"]
    assert p["command"].startswith("python ")
    assert p["llama_cpp_python"] and p["date"]
    assert data["rows"] == [[1, "2×"]] and data["target"] == "≥ 1×"


def test_the_report_renders_each_result_with_its_provenance(tmp_path: Path) -> None:
    out = save("probe", topic="restore", title="probe title", columns=["x"], rows=[["42×"]],
               where=tmp_path)  # fmt: skip
    data = json.loads(out.read_text())
    data["_file"] = "bench/results/probe.json"
    unrecorded = {"topic": "earlier", "title": "old", "columns": ["m"], "rows": [["1"]],
                  "provenance": {"recorded": False, "source": "git show X:BENCHMARKS.md"},
                  "_file": "bench/results/old.json"}  # fmt: skip
    text = report.render([data, unrecorded])
    assert "## Restore vs re-prefill" in text and "### probe title" in text
    assert "| 42× |" in text
    assert data["provenance"]["commit"][:10] in text
    assert "none recorded" in text
    assert text.index("Restore vs re-prefill") < text.index("Earlier figures")


def test_benchmarks_md_is_what_the_results_render() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.report", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
