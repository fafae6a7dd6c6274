"""What the CLI defines once for every command: --json, one-line errors and exit codes, the shared parameter types
and the engine built from --engine/--workers/--ray-address."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from vecbridge.cli import main
from vecbridge.cli.group import Command, group
from vecbridge.cli.options import engine_options


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _leaves(cmd, path=()):
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def test_every_command_takes_json_as_its_last_option():
    leaves = dict(_leaves(main))
    assert {"fit", "migrate", "upgrade reembed", "drift watch", "upgrade cutover", "info"} <= set(leaves)
    for name, cmd in leaves.items():
        assert isinstance(cmd, Command), name
        options = [p for p in cmd.params if isinstance(p, click.Option)]
        assert options[-1].opts == ["--json"], name


@pytest.mark.parametrize("args, message", [
    (("fit", "--source", "file:///x", "--target", "file:///y", "--param", "nope", "-o", "a.vb"),
     "--param expects KEY=VALUE, got 'nope'"),
    (("link", "file:///x", "--pairs", "unsupervised", "--param", "=3", "-o", "l.npz"),
     "--param expects KEY=VALUE, got '=3'"),
    (("search", "--wrap", "nothing", "--vectors", __file__), "--wrap takes OLD_URL=ALIGNMENT, got 'nothing'"),
])
def test_a_malformed_pair_parameter_is_bad_input_in_one_line(args, message):
    r = run(*args)
    assert r.exit_code == 3, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {message}"], r.stderr


def test_interrupting_a_resumable_command_says_how_to_resume(monkeypatch, tmp_path):
    import vecbridge.jobs

    def interrupted(*args, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(vecbridge.jobs, "migrate", interrupted)
    r = run("migrate", "file:///x", "--alignment", tmp_path / "a.vb", "--to", "file:///y")
    assert r.exit_code == 130
    assert r.stderr.strip() == ("error: interrupted; rerun the same command with --resume to continue where it "
                                "stopped")
    monkeypatch.setattr(vecbridge.jobs, "verify", interrupted)
    r = run("verify", "file:///x", "file:///y", "--alignment", tmp_path / "a.vb")
    assert r.exit_code == 130 and r.stderr.strip() == "error: interrupted"


def test_warnings_are_lines_but_a_collected_open_file_is_not_shown(monkeypatch, tmp_path):
    import warnings

    import vecbridge.jobs

    def warns(*args, **options):
        warnings.warn("the map is in doubt", UserWarning)
        warnings.warn("unclosed file <_io.BufferedReader name=21>", ResourceWarning)
        raise KeyboardInterrupt

    monkeypatch.setattr(vecbridge.jobs, "verify", warns)
    r = run("verify", "file:///x", "file:///y", "--alignment", tmp_path / "a.vb")
    assert r.stderr.splitlines() == ["warning: the map is in doubt", "error: interrupted"], r.stderr


def _engine_probe():
    seen = []

    @group()
    def cli():
        pass

    @cli.command()
    @engine_options("the work spread over Ray tasks")
    def job(engine):
        seen.append(engine)

    return cli, seen


def test_the_engine_options_give_the_command_one_engine(monkeypatch):
    from vecbridge.runtime.engine import LOCAL

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cli, seen = _engine_probe()
    assert CliRunner().invoke(cli, ["job", "--workers", "5"]).exit_code == 0
    assert seen == [LOCAL]
    pytest.importorskip("ray")
    r = CliRunner().invoke(cli, ["job", "--engine", "ray", "--workers", "3", "--ray-address", "127.0.0.1:1"])
    assert r.exit_code == 0, r.output
    engine = seen[-1]
    assert (engine.name, engine.workers, engine.address) == ("ray", 3, "127.0.0.1:1")
