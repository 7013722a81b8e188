"""Interrupts through the real entry point (subprocesses): Ctrl-C during a run and during
start-up print one line ``dcsim: interrupted; nothing written`` and exit 130; SIGTERM
exits 143 the same way; nothing is left in ``--out``; a killed sweep parent leaves no
worker process running (issue 11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sweep_cases import write_sweep

REPO = Path(__file__).resolve().parents[2]
LINE = "dcsim: interrupted; nothing written"
LONG = {  # ~1.2M requests: ~20 s of compiled simulation, far longer than any test waits
    "name": "long", "seed": 1, "duration_s": 6000, "warmup_s": 0, "drain_s": 60,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                           "arrival": {"kind": "poisson", "rate_per_s": 200}}},
    "fleets": [{"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"],
                                           "replicas": 8}]}],
}


def _as_a_foreground_job() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults, as a shell starts a
    foreground command. An ignored disposition is inherited through exec, and something
    in a long pytest worker (seen once in a full `make test` under load) can leave SIGINT
    ignored: the child then never sees the Ctrl-C and runs to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(args, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "sim.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_a_foreground_job)


def long_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(LONG, sort_keys=False))
    return path


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


@pytest.mark.slow  # 6 s into a long simulation each
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl_c", "sigterm"])
def test_signal_during_a_run(tmp_path, sig, code):
    proc = start(["run", long_scenario(tmp_path), "--out", tmp_path / "out", "-q"], tmp_path)
    time.sleep(6)  # past start-up, inside the simulation
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    returncode, stderr = finish(proc)
    assert returncode == code, stderr
    assert stderr.strip() == LINE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.yaml"]


def wait_until_dcsim_catches_signals(pid: int, timeout_s: float = 60.0) -> None:
    """Until dcsim's own start-up handlers are in place: the first lines of ``sim.cli``
    install the interrupt hook and, with it, a SIGTERM handler, so bit 15 of SigCgt in
    /proc/PID/status sets at that moment (the interpreter alone catches SIGINT, not
    SIGTERM). A Ctrl-C before dcsim's first line runs reaches the interpreter's own
    handler, as it would for any Python program, so the test times its signal from
    there, not from the fork or from the interpreter's start: under load, start-up alone
    can take longer than the test's delay."""
    if not sys.platform.startswith("linux"):
        time.sleep(0.5)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1:
                return
        time.sleep(0.01)
    raise TimeoutError(f"dcsim {pid} did not install its start-up handlers within {timeout_s:g} s")


@pytest.mark.parametrize("delay_s", [0.05, 0.8])
def test_ctrl_c_during_start_up(tmp_path, delay_s):
    proc = start(["run", long_scenario(tmp_path), "--out", tmp_path / "out", "-q"], tmp_path)
    wait_until_dcsim_catches_signals(proc.pid)
    time.sleep(delay_s)  # dcsim's hook is in place, its modules are still importing
    proc.send_signal(signal.SIGINT)
    returncode, stderr = finish(proc)
    assert returncode == 130, stderr
    assert stderr.strip() == LINE
    assert not (tmp_path / "out").exists()


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killed_sweep_parent_leaves_no_workers(tmp_path):
    sweep = write_sweep(tmp_path, {"duration_s": [6000, 7000, 8000]}, seeds=2,  # ~1M requests a point
                        set_={"workloads.chat.arrival.rate_per_s": 150})
    proc = start(["sweep", sweep, "--out", tmp_path / "out", "--workers", "2"], tmp_path)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = {pid for pid in _children(proc.pid) if "spawn_main" in (Path("/proc") / str(pid) / "cmdline").read_text()}
    assert len(workers) >= 2, "workers never started"
    time.sleep(3)  # the workers are simulating
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.5)
    assert not any(_alive(pid) for pid in workers), "worker processes outlived their parent"


@pytest.mark.slow
def test_ctrl_c_during_a_sweep_stops_workers_and_keeps_finished_points(tmp_path):
    sweep = write_sweep(tmp_path, {"duration_s": [6000, 8000]}, seeds=1,  # ~1M requests a point: running at 8 s
                        set_={"workloads.chat.arrival.rate_per_s": 150})
    proc = start(["sweep", sweep, "--out", tmp_path / "out", "--workers", "2"], tmp_path)
    time.sleep(8)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGINT)
    returncode, stderr = finish(proc)
    assert returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("dcsim: interrupted; nothing half-written")
    assert "Traceback" not in stderr
    time.sleep(2)
    assert not any(_alive(pid) for pid in workers)
    assert not list((tmp_path / "out" / "points").glob(".*"))  # no half-written point file
