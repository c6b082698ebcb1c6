"""register: log the deployable model to the MLflow model registry and set its aliases.

The deployable model is the distilled student exported to ONNX with fused attention and int8
weights (the deployed chain, ``student_onnx_int8`` in evaluate), with its tokenizer, as an
MLflow pyfunc (``pipeline/serving_model.py``): raw text in, label and probability out. Each
run registers a new version with alias ``challenger``; the first version ever also becomes
``champion`` (promotion of later challengers is a separate, gated step). The version carries
the git commit, the pipeline run and its dev accuracy as tags. Refuses to register below
``register.min_accuracy``. Writes models/registry.json with the name, version and aliases.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import pandas as pd

from pipeline.io import DataError, read_json, write_json
from pipeline.params import Params, load_params
from pipeline.provenance import git_commit
from pipeline.tracking import (
    alias_version,
    log_pyfunc_model,
    project_root,
    set_aliases,
    stage_run,
)

SERVING_PACKAGES = ("onnxruntime", "tokenizers", "numpy", "pandas")
DEPLOYED = "student_onnx_int8"  # the evaluate variant this stage registers
SERVING_CODE = Path(__file__).resolve().parent.parent / "serving_model.py"


def pip_requirements() -> list[str]:
    """Exact pins of what the serving model imports, from this environment (no inference)."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in SERVING_PACKAGES]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, default=Path("models/quantize/student_int8.onnx"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--evaluation", type=Path, default=Path("metrics/evaluate.json"))
    parser.add_argument("--out", type=Path, default=Path("models/registry.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg = params.register
    evaluation = read_json(args.evaluation)
    deployed = evaluation.get(DEPLOYED)
    if deployed is None:
        raise DataError(f"{args.evaluation}: no {DEPLOYED!r} entry; rerun `dvc repro evaluate`")
    if deployed["accuracy"] < cfg.min_accuracy:
        raise DataError(
            f"dev accuracy {deployed['accuracy']:.4f} is below register.min_accuracy={cfg.min_accuracy}; not registering"
        )
    with stage_run("register", params, ["register", "task", "evaluate"], [args.onnx, args.tokenizer, args.evaluation]) as tracker:
        example = pd.DataFrame({"text": ["a gripping , beautifully acted film .", "dull and far too long ."]})
        version = log_pyfunc_model(
            name="model",
            python_model=str(SERVING_CODE),
            artifacts={"onnx": str(args.onnx), "tokenizer": str(args.tokenizer)},
            pip_requirements=pip_requirements(),
            input_example=example,
            registered_model_name=cfg.model_name,
            model_config={"max_length": params.task.max_length, "stride": params.task.stride,
                          "aggregate": params.task.aggregate, "threads": params.evaluate.threads},
            tags={"git_commit": git_commit(project_root())[0], "dev_accuracy": f"{deployed['accuracy']:.4f}",
                  "pipeline_run": tracker.parent_id or ""},
        )
        aliases = ["challenger"] + ([] if alias_version(cfg.model_name, "champion") else ["champion"])
        set_aliases(cfg.model_name, version, aliases)
        record = {"model_name": cfg.model_name, "version": version, "aliases": aliases, "run_id": tracker.run_id,
                  "model_uri": f"models:/{cfg.model_name}/{version}", "dev_accuracy": deployed["accuracy"]}
        write_json(record, args.out)
        tracker.log_metrics({"dev_accuracy": deployed["accuracy"], "registered_version": float(version)})
        tracker.log_artifact(args.out)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
