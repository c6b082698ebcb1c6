"""The library stays a library: importing it loads none of the workflow stack."""

import json
import subprocess
import sys

import pytest

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
                                    "pipeline.stages.report", "pipeline.cli"])
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


@pytest.mark.parametrize("module", ["pipeline.stages.pretrain", "pipeline.stages.finetune", "pipeline.stages.baseline",
                                    "pipeline.stages.cnn", "pipeline.stages.teacher_logits"])
def test_the_training_stages_functions_import_without_the_tracking_stack(module: str) -> None:
    """benchmarks/gpu_session.sh runs these stages' functions on a GPU machine that has torch,
    scikit-learn and tokenizers but no mlflow, dvc, prefect or skops: a stage imports those in main."""
    loaded = loaded_by(module) & {"mlflow", "prefect", "dvc", "skops", "datasets"}
    assert loaded == set(), f"import {module} pulled in {sorted(loaded)}"
