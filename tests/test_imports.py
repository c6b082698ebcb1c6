"""The library stays a library: importing it loads none of the workflow stack."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("pipeline", "mlflow", "prefect", "dvc", "transformers", "onnx", "onnxruntime", "datasets")


def loaded_by(modules: str) -> set[str]:
    """Top-level packages in sys.modules after ``import <modules>`` in a fresh interpreter."""
    code = f"import sys, json, {modules}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_minibert_loads_no_workflow_or_optional_packages() -> None:
    loaded = loaded_by("minibert, minibert.tokenizer, minibert.hf_interop") & set(FORBIDDEN)
    assert loaded == set(), f"import minibert pulled in {sorted(loaded)}"
    assert "torch" in loaded_by("minibert.model")


@pytest.mark.parametrize("module", ["minibert", "minibert.config", "minibert.train_config", "pipeline.params",
                                    "pipeline.stages.prepare", "pipeline.stages.tokenizer", "pipeline.stages.register",
                                    "pipeline.stages.report", "pipeline.stages.transfer_set", "pipeline.stages.soft_targets",
                                    "pipeline.task", "pipeline.cli"])
def test_configs_and_the_light_stages_start_without_torch(module: str) -> None:
    """Reading params needs no torch, so the stages that train nothing skip its ~2 s import, and so
    does the CLI (``minibert predict`` serves the ONNX model; ``presets`` and ``attention`` import
    torch when they run)."""
    assert "torch" not in loaded_by(module)


def test_the_model_names_of_the_package_still_resolve() -> None:
    import minibert
    from minibert import model

    assert minibert.build_classifier is model.build_classifier and minibert.Backbone is model.Backbone
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        minibert.nope  # noqa: B018


@pytest.mark.parametrize("module", ["pipeline.pretraining", "pipeline.teacher", "pipeline.classifier_loop", "pipeline.scoring",
                                    "pipeline.tfidf", "pipeline.word_cnn", "pipeline.distillation"])
def test_the_training_loops_import_without_the_tracking_stack(module: str) -> None:
    """benchmarks/gpu_session.sh runs the training loops on a GPU machine that has torch, scikit-learn
    and tokenizers but no mlflow, dvc, prefect or skops: only a stage's main imports those."""
    loaded = loaded_by(module) & {"mlflow", "prefect", "dvc", "skops", "datasets"}
    assert loaded == set(), f"import {module} pulled in {sorted(loaded)}"


def imported_modules(path: Path) -> set[str]:
    """The modules a source file imports (``from X import y`` gives X and X.y)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_stage_imports_another_stage() -> None:
    """A stage is ``main()`` over library and pipeline modules; the loops stages share live outside
    ``pipeline/stages`` (``stages/common`` aside), so no stage is another's library."""
    stages = sorted((ROOT / "pipeline" / "stages").glob("*.py"))
    names = {p.stem for p in stages} - {"__init__", "common"}
    assert {"finetune", "distill", "cnn", "evaluate"} <= names
    for path in stages:
        others = {f"pipeline.stages.{n}" for n in names - {path.stem}}
        used = imported_modules(path) & others
        assert not used, f"{path.name} imports {sorted(used)}; move what it needs into a pipeline module"


def test_benchmarks_import_no_stage() -> None:
    """Benchmarks measure the loops the stages run, through the same modules, never a stage's internals."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 5
    for path in scripts:
        used = {m for m in imported_modules(path) if m == "pipeline.stages" or m.startswith("pipeline.stages.")}
        assert not used, f"benchmarks/{path.name} imports {sorted(used)}"
