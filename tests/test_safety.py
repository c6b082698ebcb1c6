"""Safe artifacts: nothing the project reads back is unpickled as code. Weights are safetensors,
resume checkpoints and the torch int8 state dict load with ``weights_only=True``, the baseline
is a skops file, and the registered model is code + ONNX + tokenizer.json (no pickle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p for folder in ("minibert", "pipeline", "benchmarks") for p in sorted((ROOT / folder).rglob("*.py"))]
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "joblib", "cloudpickle", "shelve", "marshal"}


def calls(tree: ast.AST, dotted: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == dotted:
            yield node


def test_every_torch_load_is_weights_only() -> None:
    found = 0
    for path in SOURCES:
        for node in calls(ast.parse(path.read_text()), "torch.load"):
            found += 1
            flags = {k.arg: ast.unparse(k.value) for k in node.keywords}
            assert flags.get("weights_only") == "True", f"{path.relative_to(ROOT)}:{node.lineno}: torch.load without weights_only=True"
    assert found >= 2, "the resume checkpoint and the int8 state dict are read with torch.load"


def test_no_source_imports_a_pickle_loader() -> None:
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            unsafe = {n.split(".")[0] for n in names} & UNSAFE_MODULES
            assert not unsafe, f"{path.relative_to(ROOT)}:{node.lineno} imports {unsafe}"
