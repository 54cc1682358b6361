"""Hostile or odd study names, storage URLs and environments (issue 17, items 7-11): no path derived
from a name leaves its folder, no value injects YAML keys into the export, no credential is shown or
handed to the user's code, and what a study writes is readable by its owner only."""

import os
import stat
from pathlib import Path

import pytest
import yaml

from autotune.export import one_line, render_yaml, write_private
from autotune.runner import child_env
from autotune.storage import mask_text, mask_url
from autotune.study.options import check_study_name, default_storage, file_stem
from autotune.study.publish import default_export_path

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize(
    "name",
    ["../../elsewhere/x", "a/b", "a\\b", ".hidden", "..", "x\nseed_everything: 1234", "tab\there", "", "n" * 129],
)
def test_a_study_name_that_is_not_a_plain_name_is_refused(name):
    with pytest.raises(Exception, match="study name") as info:
        check_study_name(name)
    assert type(info.value).__name__ == "UsageError"
    assert "\n" not in str(info.value)  # one line, even for a name holding a newline


@pytest.mark.parametrize("name", ["digits", "resnet50-a100", "my model", "v1.2_run", "ünïcode"])
def test_plain_names_are_accepted_and_keep_their_file_names(name):
    check_study_name(name)
    assert file_stem(name) == name
    assert default_storage(name) == f"sqlite:///studies/{name}.db"


@pytest.mark.parametrize("name", ["../../elsewhere/x", "..", ".", "a/../../b", "x\ny", "/abs/path", "a\\..\\b"])
def test_paths_derived_from_any_name_stay_in_their_folder(name, tmp_path):
    """A name made elsewhere (another tool, an older autotune, a shared database) still maps inside."""
    for folder, path in [
        (tmp_path, default_export_path(f"sqlite:///{tmp_path}/s.db", name)),
        (Path("studies"), default_export_path("postgresql+psycopg://u@h/db", name)),
        (Path("studies"), Path(default_storage(name)[len("sqlite:///") :])),
    ]:
        assert path.parent == folder
        assert path.resolve().parent == folder.resolve()
        assert "\n" not in str(path)


def test_a_hostile_study_name_on_the_command_line_is_one_line_exit_2_and_writes_nothing(tmp_path, cli):
    r = cli("search", MODELS / "tiny.py", "--study-name", "../../elsewhere/x", "--trials", 1)
    assert r.returncode == 2, r.stderr
    assert "study name '../../elsewhere/x'" in r.stderr and "--study-name" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not any(tmp_path.parent.parent.glob("elsewhere")) and not list(tmp_path.rglob("*.db"))


def test_values_in_the_export_header_and_notes_cannot_add_keys():
    text = render_yaml(
        {"trainer": {"precision": "32-true"}},
        ["study: x\nseed_everything: 1234", "monitor: a\r\nfoo: bar\u2028baz: 1"],
        ["note\nlr: 5"],
    )
    assert yaml.safe_load(text) == {"trainer": {"precision": "32-true"}}
    assert all(line.startswith("#") for line in text.splitlines() if "seed_everything" in line or "foo" in line or "lr: 5" in line)
    assert one_line("a\nb") == "a\\nb" and one_line("plain — text") == "plain — text"


@pytest.mark.parametrize(
    "url, secrets",
    [
        ("postgresql+psycopg://bob:s3cret@db:5432/test", ["s3cret"]),
        ("postgresql+psycopg://bob@db/test?password=s3cret", ["s3cret"]),
        ("postgresql+psycopg:///test?host=db&user=bob&password=s3cret", ["s3cret"]),
        ("postgresql+psycopg://bob:pw1@db/test?sslpassword=keypw&password=pw2", ["pw1", "keypw", "pw2"]),
        ("mysql+pymysql://bob@db/test?passwd=s3cret", ["s3cret"]),
        ("postgresql+psycopg://bob@db/test?password=p%40ss%26word", ["p@ss&word", "p%40ss%26word"]),
    ],
)
def test_every_credential_form_is_masked(url, secrets):
    masked = mask_url(url)
    assert "***" in masked
    for secret in secrets:
        assert secret not in masked
    assert "bob" in masked or "user=bob" in masked or "bob" not in url
    message = f"could not connect to {url} with password {secrets[0]}"
    assert all(secret not in mask_text(message, url) for secret in secrets[:1])


def test_urls_without_credentials_are_unchanged():
    for url in ["sqlite:///studies/x.db", "postgresql+psycopg://bob@db:5432/test?sslmode=require", "x:y"]:
        assert mask_url(url) == url


def test_trial_processes_do_not_get_the_storage_url(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "postgresql+psycopg://bob:s3cret@db/test")
    monkeypatch.setenv("MY_OWN_VARIABLE", "kept")
    env = child_env({"AUTOTUNE_TRIAL_NUMBER": "3"})
    assert "AUTOTUNE_STORAGE" not in env
    assert env["MY_OWN_VARIABLE"] == "kept" and env["AUTOTUNE_TRIAL_NUMBER"] == "3"


def test_private_files_honour_a_stricter_umask(tmp_path):
    old = os.umask(0o077)
    try:
        write_private(tmp_path / "new" / "a.yaml", "x: 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "a.yaml").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700


def test_a_search_hides_the_storage_from_the_model_and_writes_owner_only_files(tmp_path, cli):
    """End to end: every process that imports the user's model file (inspection, warm pool, trial)
    sees no AUTOTUNE_STORAGE, and the study folder, database, export and report are owner-only."""
    seen = tmp_path / "seen.txt"
    model = tmp_path / "leaky.py"
    model.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(MODELS)!r})\n"
        "from tiny import TinyData, TinyModel  # noqa: F401\n"
        f"with open({str(seen)!r}, 'a') as f:\n"
        "    f.write(os.environ.get('AUTOTUNE_STORAGE', 'absent') + '\\n')\n"
    )
    storage = "sqlite:///studies/leaky.db"
    old = os.umask(0o022)  # the usual umask: files would be 0644 without autotune's own modes
    try:
        r = cli("search", model, "--trials", 1, "--confirm", 0, "--samples", 256, env={"AUTOTUNE_STORAGE": storage}, check_rc=0)
        cli("report", "studies/leaky.db", check_rc=0)
    finally:
        os.umask(old)
    lines = seen.read_text().splitlines()
    assert lines and set(lines) == {"absent"}, lines
    assert stat.S_IMODE((tmp_path / "studies").stat().st_mode) == 0o700
    for name in ("leaky.db", "leaky.best.yaml", "leaky.report.html"):
        assert stat.S_IMODE((tmp_path / "studies" / name).stat().st_mode) == 0o600, (name, r.stdout)
