"""The command line's own errors: one line, exit code 2, and a suggestion for a mistyped word."""

import pytest

from autotune.cli import main


@pytest.mark.parametrize("argv, message", [
    (["serch", "model.py"], "argument COMMAND: invalid choice: 'serch' (choose from 'search', "),
    (["search", "model.py", "--trails", "3"], "unrecognized arguments: --trails 3; did you mean --trials? (see `autotune search --help`)"),
    (["search", "model.py", "--trails=3", "--sedd", "1"], "did you mean --trials (for --trails) and --seed (for --sedd)?"),
    (["show", "digits", "--format", "jsn"], "invalid choice: 'jsn' (choose from 'table', 'json', 'yaml'); did you mean json?"),
    (["worker", "--studyname", "x"], "did you mean --study-name? (see `autotune worker --help`)"),
    (["--debgu"], "unrecognized arguments: --debgu; did you mean --debug?"),
])
def test_a_mistyped_flag_or_command_gets_a_suggestion(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    if argv[0] == "serch":
        assert err.rstrip().endswith("did you mean search? (see `autotune --help`)")


def test_no_suggestion_when_nothing_is_close(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["search", "model.py", "--zzzz"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert "unrecognized arguments: --zzzz (see `autotune search --help`)" in err and "did you mean" not in err


def test_ctrl_c_after_the_search_finished_says_where_its_results_are_not_how_to_resume(monkeypatch, tmp_path):
    """A new user's Ctrl-C landed while the summary printed: the output ended in a bare 'interrupted'."""
    import autotune.report
    import autotune.study
    from autotune.study.search import SearchResult

    export = tmp_path / "m.best.yaml"
    export.write_text("trainer: {}\n")
    result = SearchResult("m", f"sqlite:///{tmp_path}/m.db", 3, None, None, export, study=object())

    class UI:
        def stop(self):
            pass

        def summary(self, *args):
            raise KeyboardInterrupt

    monkeypatch.setattr(autotune.study, "run_search", lambda opts, ui: result)
    monkeypatch.setattr(autotune.report, "make_ui", lambda quiet: UI())
    monkeypatch.setattr("autotune.study.settings.settings_of", lambda study: None)
    from autotune.cli import _cmd_search, build_parser
    from autotune.errors import Interrupted

    with pytest.raises(Interrupted) as stopped:  # main() prints it and exits 130 (143 for SIGTERM), as any interruption
        _cmd_search(build_parser().parse_args(["search", str(tmp_path / "m.py")]))
    assert str(stopped.value) == (f"interrupted while printing the summary: the search had finished; its config was written to "
                                  f"{export}; autotune show m --storage sqlite:///{tmp_path}/m.db shows its results")


def test_a_mistyped_study_name_gets_the_closest_database_in_its_folder(tmp_path, cli):
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "proj.db").write_bytes(b"")
    r = cli("show", "porj")
    assert r.returncode == 2 and r.stderr == ("autotune: error: study database 'studies/porj.db' does not exist; did you mean "
                                              "'studies/proj.db'? check the path, or run `autotune search` first\n"), r.stderr
    r = cli("show", "zzzzzz")
    assert r.returncode == 2 and "did you mean" not in r.stderr
    # names alike only in their shared suffix are not offered ('lm.db' read as 60% like 'ae.db')
    (tmp_path / "studies" / "ae.db").write_bytes(b"")
    r = cli("show", "lm")
    assert r.returncode == 2 and "did you mean" not in r.stderr, r.stderr
    # a storage URL without the file's .db: the database, not the path as given (helper-32)
    (tmp_path / "studies" / "proj.best.yaml").write_text("model: {}\n")
    r = cli("show", "proj", "--storage", "sqlite:///studies/proj")
    assert r.returncode == 2 and "does not exist; did you mean 'studies/proj.db'? check the path" in r.stderr, r.stderr
