"""Where a result came from: the git commit, the DVC digests of the data it read, and the params
its stage declares in dvc.yaml.

DVC already hashes every tracked input: ``*.dvc`` files for raw data, ``dvc.lock`` for stage
outputs. We read those records rather than re-hashing, so the digest MLflow shows is the one
``dvc status`` compares. A path DVC does not know (a stage run by hand) gets a local md5.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from minibert.validation import ConfigError
from pipeline.params import PROFILE_FILE, Params, flatten

# libyaml's loader when PyYAML has it: it reads dvc.lock in 12 ms instead of 120 ms, and every
# stage reads it at start-up for its input digests.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def git_commit(root: Path) -> tuple[str, bool]:
    """(commit sha or "unknown", True if the work tree has uncommitted changes)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(
            subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
        )
        return sha, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def _dvc_records(root: Path) -> dict[str, str]:
    """{path relative to root: md5} from dvc.lock outs and every *.dvc file."""
    records: dict[str, str] = {}
    lock = root / "dvc.lock"
    if lock.is_file():
        for stage in (yaml.load(lock.read_text(), Loader=_YAML_LOADER) or {}).get("stages", {}).values():
            for out in stage.get("outs", []):
                records[os.path.normpath(out["path"])] = out.get("md5", "")
    for dvc_file in root.glob("data/**/*.dvc"):
        for out in (yaml.load(dvc_file.read_text(), Loader=_YAML_LOADER) or {}).get("outs", []):
            rel = os.path.relpath(dvc_file.parent / out["path"], root)
            records[os.path.normpath(rel)] = out.get("md5", "")
    return records


def locked_dependency(stage: str, path: str, root: Path) -> str:
    """``"md5:<digest>"`` that ``root/dvc.lock`` records for ``stage``'s dependency ``path`` (the input its last run
    read), or "" where there is none."""
    try:
        deps = (yaml.load((root / "dvc.lock").read_text(), Loader=_YAML_LOADER) or {})["stages"][stage]["deps"]
    except (OSError, KeyError, TypeError):
        return ""
    return next((f"md5:{d['md5']}" for d in deps if d.get("path") == path and d.get("md5")), "")


def _byte_code(path: Path) -> bool:
    """Python's __pycache__ files, which .dvcignore keeps out of DVC's hashes too."""
    return path.suffix == ".pyc" or "__pycache__" in path.parts


def _local_md5(path: Path) -> str:
    digest = hashlib.md5()
    files = sorted(p for p in path.rglob("*") if p.is_file() and not _byte_code(p)) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _relative(path: str | os.PathLike[str], root: Path) -> str:
    return os.path.normpath(os.path.relpath(Path(path).resolve(), root.resolve()))


def data_digests(paths: list[Path], root: Path) -> dict[str, str]:
    """{relative path: "md5:<dvc md5>" or "local-md5:<md5>"} for each existing input path."""
    records = _dvc_records(root)
    out = {}
    for path in paths:
        rel = _relative(path, root)
        if rel in records and records[rel]:
            out[rel] = f"md5:{records[rel]}"
        elif Path(path).exists():
            out[rel] = f"local-md5:{_local_md5(Path(path))}"
    return out


def raw_data_digests(root: Path) -> dict[str, str]:
    """Digest of each raw dataset folder under ``root / data/raw`` (what ``dvc pull`` fetched)."""
    return {k: v for k, v in data_digests(sorted(root.glob("data/raw/*")), root).items()
            if not k.endswith(".dvc") and not k.endswith(".gitignore")}


def _dvc_stage(stage: str, root: Path) -> dict:
    path = root / "dvc.yaml"
    try:
        stages = (yaml.load(path.read_text(), Loader=_YAML_LOADER) or {}).get("stages") or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror}); stages run from the project root, "
                          "where dvc.yaml declares each stage's params (or set DVC_ROOT to that folder)") from err
    if stage not in stages:
        raise ConfigError(f"{path}: no stage {stage!r} (stages: {sorted(stages)}); declare it there with the params it reads")
    return stages[stage]


def declared_params(stage: str, root: Path) -> tuple[str, ...]:
    """The params.yaml keys (sections or dotted keys) that ``stage`` declares in ``root/dvc.yaml``:
    what DVC re-runs the stage for, and so what its MLflow run records (the values under the active
    profile overlay, ``profile.yaml``, whose sections each stage tracks too). Entries naming another params
    file (``- other.yaml: [...]``) are refused: the stages read params.yaml and the overlay alone."""
    return _params_of(_dvc_stage(stage, root), stage, root)


def _params_of(entry_of_stage: dict, stage: str, root: Path) -> tuple[str, ...]:
    keys: list[str] = []
    for entry in entry_of_stage.get("params") or []:
        if isinstance(entry, dict) and set(entry) == {"params.yaml"}:
            keys.extend(entry["params.yaml"] or [])
        elif isinstance(entry, dict) and set(entry) == {PROFILE_FILE}:
            continue  # the active overlay's sections: their values are already in the params read
        elif isinstance(entry, str):
            keys.append(entry)
        else:
            raise ConfigError(f"{root / 'dvc.yaml'}: stage {stage!r} params entry {entry!r}: name keys of params.yaml "
                              "only (a section such as `finetune` or a dotted key such as `train.precision`)")
    return tuple(keys)


def declared_param_values(stage: str, params: Params, root: Path) -> dict[str, Any]:
    """{flattened key: value} of the params ``stage`` declares in dvc.yaml."""
    return _values_of(declared_params(stage, root), params)


def _values_of(keys: tuple[str, ...], params: Params) -> dict[str, Any]:
    return {k: v for k, v in flatten(params).items() if any(k == s or k.startswith(f"{s}.") for s in keys)}


def resume_fingerprint(stage: str, params: Params, inputs: list[Path], root: Path) -> str:
    """What a killed run's checkpoint must match to be resumed: the stage's declared params and the
    content of its inputs and of every dependency dvc.yaml lists for it (its code too), hashed from
    the files themselves (a record in dvc.lock may be stale when a file was rebuilt by hand)."""
    entry = _dvc_stage(stage, root)  # dvc.yaml read once for both the params and the deps
    deps = [root / d for d in entry.get("deps") or [] if isinstance(d, str) and "${" not in d]
    files = {_relative(p, root): Path(p) for p in [*inputs, *deps]}
    content = {rel: _local_md5(path) for rel, path in sorted(files.items()) if path.exists()}
    record = {"params": _values_of(_params_of(entry, stage, root), params), "content": content}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()
