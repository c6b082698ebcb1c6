"""register: log the deployable model to the MLflow model registry and set its aliases.

The deployable model is the distilled student exported to ONNX with fused attention and int8
weights (the deployed chain, ``student_onnx_int8`` in evaluate), with its tokenizer, as an
MLflow pyfunc (``pipeline/serving_model.py``): raw text in, label and probability out. Each
run registers a new version with alias ``challenger``; the first version ever also becomes
``champion`` (promotion of later challengers is a separate, gated step). The version carries
the git commit, the pipeline run and its dev accuracy as tags. Refuses to register below
``register.min_accuracy``. Writes models/registry.json with the name, version and aliases, and the
model card (``pipeline/model_card.py``) to models/card/README.md, which is registered with the
model as its README and set as the version's description.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import pandas as pd

from minibert.contract import read_onnx_contract
from minibert.tokenizer import load_tokenizer
from pipeline.document import to_markdown
from pipeline.io import DataError, atomic_path, read_json, write_json
from pipeline.model_card import DEPLOYED, card_blocks
from pipeline.packaging import SERVING_CODE, SERVING_LIBRARY, pip_requirements, serving_config
from pipeline.params import Params, RegisterParams, load_params
from pipeline.provenance import git_commit, raw_data_digests
from pipeline.splits import load_split, split_path
from pipeline.tracking import (
    alias_version,
    log_pyfunc_model,
    project_root,
    set_aliases,
    set_version_description,
    stage_run,
)

INFERENCE_PARAMS = {"min_confidence": 0.0}  # the served model's inference params and defaults (its signature's)


def run(cfg: RegisterParams, evaluation: dict[str, dict[str, float]], where: Path) -> dict[str, float]:
    """The deployed model's test metrics from evaluate's (read from ``where``), which register only at
    ``register.min_accuracy`` or above: DataError, naming the accuracy and the key, below it."""
    deployed = evaluation.get(DEPLOYED)
    if deployed is None:
        raise DataError(f"{where}: no {DEPLOYED!r} entry; rerun `dvc repro evaluate`")
    if deployed["accuracy"] < cfg.min_accuracy:
        raise DataError(
            f"test accuracy {deployed['accuracy']:.4f} is below register.min_accuracy={cfg.min_accuracy}; not registering"
        )
    return deployed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, default=Path("models/quantize/student_int8.onnx"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--evaluation", type=Path, default=Path("metrics/evaluate.json"))
    parser.add_argument("--out", type=Path, default=Path("models/registry.json"))
    parser.add_argument("--data-report", type=Path, default=Path("reports/data.json"))
    parser.add_argument("--data", type=Path, default=Path("data/prepared"), help="the task's name and example texts")
    parser.add_argument("--card", type=Path, default=Path("models/card/README.md"),
                        help="the model card, registered with the model as README.md")
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg = params.register
    evaluation = read_json(args.evaluation)
    deployed = run(cfg, evaluation, args.evaluation)
    inputs = [args.onnx, args.tokenizer, args.evaluation, args.data_report, split_path(args.data, "test")]
    with stage_run("register", params, inputs) as tracker:
        root = project_root()
        sha, dirty = git_commit(root)
        provenance = {"git commit": sha + (" (uncommitted changes)" if dirty else ""), "pipeline run": tracker.parent_id or "",
                      "registering run": tracker.run_id,
                      "load it with": f"mlflow.pyfunc.load_model('models:/{cfg.model_name}@champion')"}
        contract = read_onnx_contract(args.onnx)
        vocab_size = load_tokenizer(args.tokenizer).get_vocab_size()
        card = partial(card_blocks, cfg.model_name, contract, vocab_size, params.data.dataset, deployed=DEPLOYED, evaluation=evaluation, data_report=read_json(args.data_report),
                       digests=raw_data_digests(root), provenance=provenance)
        if args.card.name != "README.md":
            raise DataError(f"--card {args.card}: the model card's file must be called README.md")
        with atomic_path(args.card) as tmp:
            tmp.write_text(to_markdown(card(version=None), args.card.parent), encoding="utf-8")
        example = pd.DataFrame({"text": load_split(args.data, "test")["text"].head(2).tolist()})
        version = log_pyfunc_model(
            name="model",
            python_model=str(SERVING_CODE),
            code_paths=[str(SERVING_LIBRARY)],
            artifacts={"onnx": str(args.onnx), "tokenizer": str(args.tokenizer), "readme": str(args.card)},
            pip_requirements=pip_requirements(),
            input_example=(example, INFERENCE_PARAMS),
            registered_model_name=cfg.model_name,
            model_config=serving_config(contract, params.export.threads),
            tags={"git_commit": sha, "dev_accuracy": f"{deployed['accuracy']:.4f}",
                  "pipeline_run": tracker.parent_id or ""},
        )
        set_version_description(cfg.model_name, version, to_markdown(card(version=version), args.card.parent))
        aliases = ["challenger"] + ([] if alias_version(cfg.model_name, "champion") else ["champion"])
        set_aliases(cfg.model_name, version, aliases)
        record = {"model_name": cfg.model_name, "version": version, "aliases": aliases, "run_id": tracker.run_id,
                  "model_uri": f"models:/{cfg.model_name}/{version}", "dev_accuracy": deployed["accuracy"]}
        write_json(record, args.out)
        tracker.log_metrics({"dev_accuracy": deployed["accuracy"], "registered_version": float(version)})
        tracker.log_artifact(args.out)
        tracker.log_artifact(args.card)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
