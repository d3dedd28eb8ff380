"""Which source produced a result: the project's commit, or a hash of its code when there is none.

A run's provenance names the commit of this project's source. ``git rev-parse HEAD`` answers that
only when the project root is itself the top level of a git work tree: a copy of the source placed
inside some other repository (a scratch folder, a job's workspace) would otherwise record that
repository's commit. Where git cannot answer, the commit comes from ``FUSION_SOURCE_COMMIT`` or
from a ``SOURCE_COMMIT`` file at the project root (written when the source is exported for another
machine); where neither exists, the result says ``not a git checkout`` and carries the sha256 of
the code (the ``.py`` files of ``precisionkit/`` and ``pipeline/``), which is recorded in every case.

Nothing here imports torch or dagster: it is cheap, and :func:`source_provenance` is computed once
per process and root.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tomllib
from pathlib import Path

#: The project root: the folder holding ``pipeline/`` and ``precisionkit/``.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: Environment variable naming the source commit where the source is not a git checkout.
COMMIT_ENV = "FUSION_SOURCE_COMMIT"
#: File at the project root naming the source commit (one line), written when the source is exported.
COMMIT_FILE = "SOURCE_COMMIT"
#: What ``git_commit`` says when no commit can be named.
NOT_A_CHECKOUT = "not a git checkout"
#: The packages whose code the source hash covers.
HASHED_PACKAGES = ("precisionkit", "pipeline")


def _git(root: Path, *args: str) -> str | None:
    """``git <args>`` run in ``root``: its stripped output, or None when git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _same_folder(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except OSError:
        return False


def git_checkout_commit(root: Path = PROJECT_ROOT) -> str | None:
    """HEAD of the git work tree whose top level is ``root`` (``+dirty`` with uncommitted changes to
    tracked files), or None when ``root`` is not the top level of one (not in git, or inside another
    repository)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or not _same_folder(top, root):
        return None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if dirty else "")


def source_sha256(root: Path = PROJECT_ROOT) -> str:
    """sha256 over the ``.py`` files of the hashed packages under ``root``, in sorted path order
    (each file's relative path, then its bytes), so a renamed or moved file changes it too."""
    digest = hashlib.sha256()
    files = sorted(p for pkg in HASHED_PACKAGES for p in (root / pkg).rglob("*.py") if p.is_file())
    for path in files:
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        digest.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _stamped_commit(root: Path) -> str | None:
    path = root / COMMIT_FILE
    try:
        first = path.read_text().strip().splitlines()
    except OSError:
        return None
    return first[0].strip() if first and first[0].strip() else None


@functools.cache
def source_provenance(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """``git_commit`` (a commit, or :data:`NOT_A_CHECKOUT`), where it came from (``commit_origin``:
    ``git``, the environment variable, the stamp file or ``none``) and ``source_sha256``. Once per
    process and root: the source does not change while a run lasts."""
    root = Path(root)
    sha = source_sha256(root)
    commit = git_checkout_commit(root)
    if commit is not None:
        return {"git_commit": commit, "commit_origin": "git", "source_sha256": sha}
    env = os.environ.get(COMMIT_ENV, "").strip()
    if env:
        return {"git_commit": env, "commit_origin": COMMIT_ENV, "source_sha256": sha}
    stamped = _stamped_commit(root)
    if stamped:
        return {"git_commit": stamped, "commit_origin": f"{COMMIT_FILE} file", "source_sha256": sha}
    return {"git_commit": NOT_A_CHECKOUT, "commit_origin": "none", "source_sha256": sha}


@functools.cache
def package_version(root: Path = PROJECT_ROOT) -> str:
    """The project's version: ``pyproject.toml`` next to the source that runs (a copy run from
    ``PYTHONPATH`` has no installed metadata), else the installed distribution's, else
    ``precisionkit.__version__``."""
    try:
        with open(Path(root) / "pyproject.toml", "rb") as f:
            version = tomllib.load(f).get("project", {}).get("version")
        if version:
            return str(version)
    except (OSError, tomllib.TOMLDecodeError):
        pass
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        return installed("fusion-precision")
    except PackageNotFoundError:
        from precisionkit import __version__

        return __version__


def commit_known(commit: str, root: Path = PROJECT_ROOT) -> bool | None:
    """Whether this repository holds ``commit`` (``+dirty`` ignored): True or False, or None when
    ``root`` is not a git checkout or the value is not a commit hash at all (nothing to compare)."""
    sha = commit.removesuffix("+dirty").strip()
    if not sha or not all(c in "0123456789abcdefABCDEF" for c in sha) or len(sha) < 7:
        return None
    if git_checkout_commit(root) is None:
        return None
    try:
        out = subprocess.run(
            ["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=root, capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.returncode == 0
