"""The `voxelizer` logger (device, plan, shader modules at INFO; GPU times at DEBUG), the
command's --verbose, which prints them and nothing else, and the exit statuses of --help."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from voxelizer import Voxelizer, cli
from voxelizer.gpu.compiler import compile_shader, shipped_dir
from voxelizer.gpu.scan import SCAN_BLOCKS, scan_defines
from voxelizer.log import LOGGER_NAME
from voxelizer.progress import TerminalProgress

from ..helpers import PROJECT_MODELS, run_cli

GEAR = PROJECT_MODELS / "gear.ply"


def _messages(caplog: pytest.LogCaptureFixture, prefix: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith(LOGGER_NAME) and record.getMessage().startswith(prefix)
    ]


def test_the_library_adds_only_a_null_handler() -> None:
    handlers = logging.getLogger(LOGGER_NAME).handlers
    assert handlers and all(isinstance(h, logging.NullHandler) for h in handlers)


def test_device_plan_and_cache_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME), Voxelizer() as vox:
        vox.voxelize(GEAR, 16)
    (device,) = _messages(caplog, "device: ")
    assert vox.device.name in device and "chosen by " in device
    (plan,) = _messages(caplog, "plan: ")
    assert "16x16x16 grid whole" in plan and "batches of 1,920" in plan and "budget" in plan
    shaders = _messages(caplog, "shader")  # the modules shipped in the package
    assert shaders and all(
        message.startswith("shader: shipped ") and str(shipped_dir()) in message
        for message in shaders
    )
    assert not _messages(caplog, "GPU ms: "), "GPU times are DEBUG"


def test_the_device_record_says_why(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOXELIZER_DEVICE", "0")
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        with Voxelizer() as vox:
            pass
        with Voxelizer(device=0) as vox:
            pass
    by_env, by_argument = _messages(caplog, "device: ")
    assert by_env.endswith("chosen by $VOXELIZER_DEVICE='0'")
    assert by_argument.endswith("chosen by device=0")
    assert vox.device.name in by_argument


def test_slabs_are_logged(caplog: pytest.LogCaptureFixture, gpu: Voxelizer) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        gpu.voxelize(GEAR, 256, max_memory="4MiB")
    (plan,) = _messages(caplog, "plan: ")
    assert re.search(r"256x256x256 grid in \d+ slabs of \d+ rows", plan), plan
    assert "budget 4,194,304 bytes" in plan


def test_gpu_times_are_logged_at_debug(caplog: pytest.LogCaptureFixture, gpu: Voxelizer) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        svo = gpu.voxelize(GEAR, 16)
    (times,) = _messages(caplog, "GPU ms: ")
    for name, ms in svo.stats.gpu_ms.items():
        assert f"{name} {ms:.3f}" in times
    assert times.endswith(f"total {svo.stats.gpu_total_ms:.3f}")


def test_shader_cache_miss_compile_and_hit(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    defines = SCAN_BLOCKS.compile_defines(scan_defines({"SUBGROUP_SCAN": 0, "SHARED_RECORDS": 0}))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        first = compile_shader("scan", defines)
        second = compile_shader("scan", defines)
    assert first == second
    miss, stored, hit = _messages(caplog, "shader cache: ")
    assert miss.startswith(f"shader cache: miss {tmp_path}") and "compiling scan.comp" in miss
    assert stored.startswith(f"shader cache: compiled and stored {tmp_path}")
    assert hit.startswith(f"shader cache: hit {tmp_path}")


# --- the command line -------------------------------------------------------------------------


def test_without_verbose_nothing_more_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = run_cli(capsys, GEAR, "--grid", 16)
    assert code == 0 and stderr == ""
    assert len(stdout.splitlines()) == 1
    assert logging.getLogger(LOGGER_NAME).level == logging.NOTSET


@pytest.mark.parametrize("flag", ["-v", "--verbose", "-vv"])
def test_verbose_prints_the_records_on_stderr(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    code, stdout, stderr = run_cli(capsys, GEAR, "--grid", 16, flag)
    assert code == 0 and len(stdout.splitlines()) == 1
    lines = stderr.splitlines()
    assert lines and all(line.startswith("voxelize: ") for line in lines), stderr
    assert any(line.startswith("voxelize: plan: 16x16x16 grid whole") for line in lines)
    assert any(line.startswith("voxelize: GPU ms: ") for line in lines) == (flag == "-vv")
    logger = logging.getLogger(LOGGER_NAME)  # left as it was
    assert logger.level == logging.NOTSET
    assert all(isinstance(h, logging.NullHandler) for h in logger.handlers)


def test_verbose_draws_no_progress_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made: list[bool] = []

    def progress(*, quiet: bool) -> TerminalProgress:
        made.append(quiet)
        return TerminalProgress(quiet=quiet)

    monkeypatch.setattr(cli, "TerminalProgress", progress)
    for flags in ([], ["-v"]):
        assert run_cli(capsys, GEAR, "--grid", 16, *flags)[0] == 0
    assert made == [False, True]


def _voxelize_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxelizer", str(GEAR), "--grid", "16", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_python_m_voxelizer_with_and_without_verbose() -> None:
    """In a fresh process every record comes: the device and the shader cache too."""
    plain = _voxelize_process()
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    verbose = _voxelize_process("-v")
    assert verbose.returncode == 0, verbose.stderr
    seconds = re.compile(r"\d+\.\d\d s")
    assert seconds.sub("", verbose.stdout) == seconds.sub("", plain.stdout)
    lines = verbose.stderr.splitlines()
    assert all(line.startswith("voxelize: ") for line in lines), verbose.stderr
    for what in ("device: ", "plan: ", "shader: shipped "):
        assert any(line.startswith("voxelize: " + what) for line in lines), what


def test_python_m_voxelizer_exit_status_of_a_usage_error() -> None:
    result = _voxelize_process("--fill-mode", "nope")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_help_lists_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["--help"])
    assert caught.value.code == 0
    help_text = capsys.readouterr().out
    epilog = help_text[help_text.index("exit status:") :]
    statuses = dict(re.findall(r"^  (\d+) +(\S.*)$", epilog, re.MULTILINE))
    assert list(statuses) == ["0", "1", "2", "130", "141", "143"]
    assert statuses["0"] == "success"
    assert statuses["1"].startswith("bad input or environment")
    assert statuses["2"].startswith("usage error")
    assert statuses["130"].startswith("interrupted")
    assert statuses["141"].startswith("the reader of stdout went away")
    assert statuses["143"].startswith("terminated (SIGTERM")
