"""Settings: okgit.toml or [tool.okgit], then OKGIT_* variables, then flags; errors name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from okgit.config import load_config
from okgit.errors import OkgitError


def test_later_sources_win(tmp_path: Path) -> None:
    (tmp_path / "okgit.toml").write_text('iterations = 5\nmode = "thorough"\nbackend = "cuda"\n')
    config = load_config(tmp_path, {"mode": "fast"}, environ={"OKGIT_ITERATIONS": "7"})
    assert (config.iterations, config.mode, config.backend) == (7, "fast", "cuda")


def test_pyproject_table_is_read_when_there_is_no_okgit_toml(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.okgit]\npatience = 3\n')
    assert load_config(tmp_path, environ={}).patience == 3


@pytest.mark.parametrize("text, needle", [
    ("iterationz = 3\n", "okgit.toml: iterationz: unknown key"),
    ("iterations = 0\n", "okgit.toml: iterations:"),
    ('[[op]]\npath = "a.py"\nentry = "Foo"\n', "okgit.toml: op.0.entry: unknown key"),
    ("iterations = [\n", "okgit.toml: invalid TOML"),
])
def test_bad_settings_name_the_key_and_the_file(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "okgit.toml").write_text(text)
    with pytest.raises(OkgitError) as err:
        load_config(tmp_path, environ={})
    assert needle in str(err.value)


def test_environment_errors_say_so(tmp_path: Path) -> None:
    with pytest.raises(OkgitError, match=r"environment \(OKGIT_\*\): device"):
        load_config(tmp_path, environ={"OKGIT_DEVICE": "tpu"})


def test_op_settings_reach_the_problem(tmp_path: Path) -> None:
    (tmp_path / "okgit.toml").write_text(
        '[[op]]\npath = "ops/a.py"\natol = 0.001\nextra_shapes = [{n = 33}]\n')
    config = load_config(tmp_path, environ={})
    assert config.problem_settings("ops/a.py") == {"atol": 0.001, "rtol": None, "extra_shapes": ((("n", 33),),)}
    assert config.problem_settings("ops/b.py") == {}


def test_a_bad_setting_is_one_line_from_the_cli(git_repo: Path) -> None:
    (git_repo / "okgit.toml").write_text("iterations = -1\n")
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", "ops/relu.py"], cwd=git_repo,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "iterations" in proc.stderr and "okgit.toml" in proc.stderr
