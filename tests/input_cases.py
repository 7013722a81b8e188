"""Running one generated input case through the ``dcsim`` command line, in-process, and
checking what every command owes the user (issue 23):

- a refusal is exit code 2, one ``dcsim: error:`` paragraph naming the place, no
  traceback, nothing on stdout;
- **no byte of a broken file reaches a message**: each case plants a unique marker in
  the files it breaks, and the marker must appear in neither stdout nor stderr;
- **nothing is written outside ``--out``**: the case runs in a fresh workspace (its
  current directory) with ``TMPDIR`` in a directory of its own; the workspace tree is
  compared before and after (names, kinds, sizes, modification times), and only the
  case's output target may change, and only when the case is accepted; the temporary
  directory must be empty afterwards.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cli_cases import dcsim
from hypothesis import HealthCheck, given, settings

_ids = itertools.count()


def marker() -> str:
    """A string no message could contain by chance."""
    return f"QZXJ{next(_ids):05d}VKQW"


@dataclass
class Case:
    """One command line over files written into a fresh workspace.

    ``files``: workspace-relative name -> bytes (or text). ``expected``: substrings of
    stderr. ``out``: the output target the command may create when accepted. ``code``:
    the expected exit code (2: refused). ``secret``: the marker planted in the files."""

    args: list
    files: dict = field(default_factory=dict)
    expected: list = field(default_factory=list)
    secret: str | None = None
    out: str | None = None
    code: int = 2
    links: dict = field(default_factory=dict)  # workspace name -> target (symlinks to create)

    def __repr__(self) -> str:  # short: a failing example shows its files' heads, not megabytes
        heads = {name: (content[:300] if len(content) > 300 else content) for name, content in self.files.items()}
        return f"Case(args={self.args}, expected={self.expected}, code={self.code}, out={self.out}, files={heads})"


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed): kind, size, mtime."""
    found = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(directory) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_mode >> 12, info.st_size, info.st_mtime_ns)
    return found


def run_case(case: Case, base: Path) -> tuple[int, str, str]:
    """Run ``case`` in a fresh workspace under ``base`` and check every property above;
    returns (exit code, stdout, stderr)."""
    from fleets.catalog_io import use_overlay

    n = next(_ids)
    workspace, tmp = base / f"ws{n}", base / f"tmp{n}"
    workspace.mkdir()
    tmp.mkdir()
    for name, content in case.files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    for name, target in case.links.items():
        (workspace / name).symlink_to(target)
    before = tree(workspace)
    cwd, tempdir = os.getcwd(), tempfile.tempdir
    os.chdir(workspace)
    tempfile.tempdir = str(tmp)
    try:
        code, stdout, stderr = dcsim(case.args)
    finally:
        os.chdir(cwd)
        tempfile.tempdir = tempdir
        use_overlay(None)
    context = f"args {case.args}\nstderr: {stderr}"
    assert "Traceback" not in stderr, context
    assert code == case.code, context
    if code == 2:
        assert stderr.startswith("dcsim: error: "), context
        assert "\n\n" not in stderr.strip(), context
        assert stdout == "", context
    for piece in case.expected:
        assert piece in stderr, f"{piece!r} not in stderr\n{context}"
    if case.secret is not None:
        assert case.secret not in stdout + stderr, f"the broken file's content reached a message\n{context}"
    after = tree(workspace)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    allowed = {k for k in changed if case.out is not None and code != 2 and (k == case.out or k.startswith(case.out + "/"))}
    assert changed == allowed, f"written outside --out: {sorted(changed - allowed)}\n{context}"
    assert not any(tmp.iterdir()), f"left in TMPDIR: {sorted(p.name for p in tmp.iterdir())}\n{context}"
    shutil.rmtree(workspace, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return code, stdout, stderr


def check_examples(strategy, examples: int, check_one) -> int:
    """Run ``check_one`` on up to ``examples`` cases drawn from ``strategy`` (fewer when
    hypothesis exhausts a small strategy); returns how many ran. Health checks are off
    (the cases run the CLI, which is slow for hypothesis) and no example database is
    kept, so every run draws afresh (derandomized under CI by tests/conftest.py)."""
    ran = []

    @settings(max_examples=examples, suppress_health_check=list(HealthCheck), database=None)
    @given(case=strategy)
    def check(case):
        check_one(case)
        ran.append(case)

    check()
    return len(ran)
