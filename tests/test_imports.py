"""The library stays a library: importing it loads none of the workflow stack."""

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("pipeline", "mlflow", "prefect", "dvc", "transformers", "onnx", "onnxruntime", "datasets")


def test_import_minibert_loads_no_workflow_or_optional_packages() -> None:
    code = (
        "import sys, json, minibert, minibert.tokenizer, minibert.hf_interop\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"import minibert pulled in {loaded}"
    assert "torch" in subprocess.run(
        [sys.executable, "-c", "import sys, minibert.model; print(sorted(sys.modules))"], capture_output=True, text=True,
        check=True).stdout


def loaded_by(module: str) -> set[str]:
    code = f"import sys, json, {module}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


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
