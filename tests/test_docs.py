"""The docs: every `$ command` in docs/*.md runs as written, and every failure kind is documented."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
pytestmark = pytest.mark.slow


def commands(page: Path) -> list[str]:
    """The ``$ `` lines of the page's ```console blocks, in order."""
    out, inside = [], False
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            inside = line.strip() == "```console" if not inside else False
            continue
        if inside and line.startswith("$ "):
            out.append(line[2:].split("  #")[0].strip())
    return out


PAGES = sorted(p for p in DOCS.glob("*.md") if commands(p))


def test_every_guide_page_exists_and_links_resolve():
    names = {p.name for p in DOCS.glob("*.md")}
    assert {"index.md", "model.md", "search-spaces.md", "objectives.md", "report.md", "scaling-out.md", "troubleshooting.md"} <= names
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links to missing {target}"


def test_every_failure_kind_is_documented_and_known():
    from autotune.errors import FAIL_KINDS

    page = (DOCS / "troubleshooting.md").read_text()
    assert [k for k in FAIL_KINDS if f"### `{k}`" not in page] == []
    produced = set()
    for path in (ROOT / "autotune").rglob("*.py"):
        text = path.read_text()
        produced |= {name.lower() for name in re.findall(r"FailKind\.([A-Z_]+)\b", text)}
        produced |= set(re.findall(r'TrialFault\(\s*"(\w+)"', text))  # the trial process raises its kinds by value
    assert produced and produced <= set(FAIL_KINDS), produced - set(FAIL_KINDS)


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_commands_of_a_page_run_as_written(page, tmp_path):
    """Each page's commands run in order in a fresh folder holding the examples, like a new checkout."""
    for folder in ("examples", "search_spaces"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STORAGE"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for command in commands(page):
        if command.startswith("autotune dashboard"):  # a server: check that it answers, then stop it
            proc = subprocess.Popen(command, shell=True, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
            port = int(re.search(r"--port (\d+)", command).group(1)) if "--port" in command else 8080
            try:
                for _ in range(100):
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                        break
                    except OSError:
                        assert proc.poll() is None, proc.communicate()[1][-2000:]
                        time.sleep(0.3)
                else:
                    raise AssertionError(f"{command!r} never answered on port {port}")
            finally:
                os.killpg(proc.pid, signal.SIGINT)
                proc.communicate(timeout=30)
            continue
        r = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{page.name}: {command!r} exited {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"


def test_the_cluster_scripts_are_valid_bash():
    for script in sorted((ROOT / "examples" / "cluster").glob("*.sh")):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"
