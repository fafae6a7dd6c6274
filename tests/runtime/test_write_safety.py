"""Write paths fail early and clearly: bad sizes are usage errors, permission problems are found before anything is
created, one run writes a target at a time, a resume keeps its batch size, and a run that lost records says so."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import flaky, lossy, write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import CheckFailed, InputError
from vecbridge.jobs import merge, migrate
from vecbridge.runtime.guard import exclusive_writer


@pytest.fixture
def setup(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old, [{"i": i} for i in range(1500)])
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    path = Alignment.from_estimator(est).save(tmp_path / "align.vb")
    b = write_collection(f"file://{tmp_path}/b", [f"b{i}" for i in range(20)], sample.docs_new[:20])
    return {"old": old.url, "align": path, "tmp": tmp_path, "b": b.url}


@contextmanager
def read_only(path):
    """A folder nobody can write in, root included: mode 0555 for other users, the immutable flag for root."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("cannot make a folder read-only for root here (chattr +i refused)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_sizes_are_usage_errors(setup, value):
    tmp = setup["tmp"]
    for args in (["migrate", setup["old"], "--alignment", setup["align"], "--to", f"file://{tmp}/n"],
                 ["merge", setup["old"], setup["b"], "--into", f"file://{tmp}/m", "--alignment", setup["align"]],
                 ["fit", "--source", setup["old"], "--target", setup["old"], "-o", tmp / "x.vb"]):
        result = run(args + ["--batch-size", value])
        assert result.exit_code == 2 and "--batch-size" in result.output, (args, result.output)
    for args in (["verify", setup["old"], setup["old"], "--alignment", setup["align"], "--sample", value],
                 ["report", setup["old"], setup["old"], "--sample", value]):
        assert run(args).exit_code == 2
    assert not (tmp / "n").exists() and not (tmp / "m").exists() and not (tmp / "x.vb").exists()
    with pytest.raises(InputError, match="positive"):
        migrate(setup["old"], setup["align"], f"file://{tmp}/n", batch_size=0)


def test_read_only_target_folder_is_refused_before_anything_is_created(setup):
    with read_only(setup["tmp"] / "ro") as ro:
        result = run(["migrate", setup["old"], "--alignment", setup["align"], "--to", f"file://{ro}/new"])
        assert result.exit_code == 4 and "cannot write" in result.output and "Traceback" not in result.output
        assert not list(ro.iterdir())
        result = run(["merge", setup["old"], setup["b"], "--into", f"file://{ro}/m", "--alignment", setup["align"]])
        assert result.exit_code == 4 and "cannot write" in result.output
    assert not list(setup["tmp"].glob("*.json"))   # no checkpoint left to demand --resume or --overwrite
    result = run(["migrate", setup["old"], "--alignment", setup["align"], "--to", f"file://{setup['tmp']}/ro/new"])
    assert result.exit_code == 0, result.output   # once writable, a plain retry works


def test_checkpoint_folder_that_cannot_be_written_is_refused_before_the_target_exists(setup):
    (setup["tmp"] / "art").mkdir()
    shutil.copy(setup["align"], setup["tmp"] / "art" / "a.vb")
    with read_only(setup["tmp"] / "art") as art:
        result = run(["migrate", setup["old"], "--alignment", art / "a.vb", "--to", f"file://{setup['tmp']}/new"])
        assert result.exit_code == 4 and "checkpoint" in result.output and "--checkpoint" in result.output
        assert not (setup["tmp"] / "new").exists()
        result = run(["migrate", setup["old"], "--alignment", art / "a.vb", "--to", f"file://{setup['tmp']}/new",
                      "--checkpoint", setup["tmp"] / "ck.json"])
        assert result.exit_code == 0, result.output


def test_fit_output_folder_that_cannot_be_written_is_refused_before_fitting(setup):
    with read_only(setup["tmp"] / "out") as out:
        result = run(["fit", "--source", setup["old"], "--target", setup["old"], "-o", out / "a.vb"])
        assert result.exit_code == 4 and "cannot write the alignment" in result.output, result.output
        assert "internal error" not in result.output


def test_a_second_writer_of_the_same_target_is_refused(setup):
    target = connect(f"file://{setup['tmp']}/new")
    with exclusive_writer(target):
        result = run(["migrate", setup["old"], "--alignment", setup["align"], "--to", "file://" + str(
            setup["tmp"]) + "/./new"])
        assert result.exit_code == 4, result.output
        assert f"another run is writing this target (pid {os.getpid()})" in result.output
        assert not target.exists()
    assert run(["migrate", setup["old"], "--alignment", setup["align"], "--to", target.url]).exit_code == 0


def test_resume_keeps_the_batch_size_of_the_interrupted_run(setup):
    tmp = setup["tmp"]
    with pytest.raises(ConnectionError):
        migrate(setup["old"], setup["align"], flaky(f"file://{tmp}/new", 2), batch_size=128)
    result = migrate(setup["old"], setup["align"], f"file://{tmp}/new", batch_size=500, resume=True)
    assert result["batch_size"] == 128 and result["resumed_from"] == 256
    migrate(setup["old"], setup["align"], f"file://{tmp}/ref", batch_size=128)
    got = {i: v for b in connect(f"file://{tmp}/new").scan(300) for i, v in zip(b.ids, b.vectors)}
    ref = {i: v for b in connect(f"file://{tmp}/ref").scan(300) for i, v in zip(b.ids, b.vectors)}
    assert got.keys() == ref.keys()
    assert all(np.array_equal(got[i], ref[i]) for i in ref)   # bit-exact, not merely close


def test_a_run_that_lost_records_fails_and_says_so(setup):
    with pytest.raises(CheckFailed, match="record count mismatch: 1,500 records read"):
        migrate(setup["old"], setup["align"], lossy(f"file://{setup['tmp']}/new"), batch_size=500)
    with pytest.raises(CheckFailed, match="record count mismatch"):
        merge(setup["old"], setup["b"], lossy(f"file://{setup['tmp']}/m"), setup["align"])


def test_interrupting_a_migration_says_how_to_continue(setup, sample):
    """Ctrl-C mid-run: exit 130, a one-line hint to resume, no traceback. The CLI runs in a child whose target writes
    are slowed down, so the signal lands mid-run however fast or loaded the machine is, and with SIGINT's default
    disposition, as in a terminal (a suite started in the background, as CI may be, hands its children SIGINT
    ignored)."""
    tmp = setup["tmp"]
    slow_writes = ("import sys, time\n"
                   "from vecbridge.connectors.file import FileCollection\n"
                   "upsert = FileCollection.upsert\n"
                   "FileCollection.upsert = lambda self, batch: (time.sleep(0.02), upsert(self, batch))[1]\n"
                   "from vecbridge.cli import main\n"
                   "main(prog_name='vecbridge')\n")
    proc = subprocess.Popen([sys.executable, "-c", slow_writes, "migrate", setup["old"], "--alignment",
                             str(setup["align"]), "--to", f"file://{tmp}/new", "--batch-size", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp.glob("align.vb.*.migrate.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err


def test_jobs_leave_the_callers_collection_objects_as_they_were(setup):
    src, b = connect(setup["old"]), connect(setup["b"])
    migrate(src, setup["align"], f"file://{setup['tmp']}/new")
    merge(src, b, f"file://{setup['tmp']}/m", setup["align"])
    assert not src.read_only and not b.read_only
