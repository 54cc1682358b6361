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
