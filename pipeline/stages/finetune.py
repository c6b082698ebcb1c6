"""finetune: the task's classifier (the teacher), initialised from the pretrained encoder.

Length-bucketed batches with dynamic padding; AdamW with warmup and decay; validation accuracy
every ``train.eval_every`` steps, and the best-scoring weights are the ones written (early stopping
by model selection on the validation split, never on the test split). The head has one output a
class of the prepared data (``dataset.json``).

When the dataset's description names an intermediate task (intermediate-task transfer, as in STILTs),
the same classifier first trains for one epoch on it (IMDb reviews for SST-2), selected on that
task's validation split, then fine-tunes on the task; its metrics carry a ``transfer_`` prefix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from tokenizers import Tokenizer

from minibert.checkpoint import check_tokenizer, load_model, save_model
from minibert.config import ModelConfig
from minibert.distributed import World
from minibert.model import Backbone, SequenceClassifier
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import RecordingTracker, Tracker
from pipeline.classifier_loop import train_classifier
from pipeline.curves import write_curves
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.splits import load_split, prepared, split_path
from pipeline.task import encode_train, reads
from pipeline.teacher import build, finetune_loop, head_config, transfer_phase, transfer_splits


def run(params: Params, tok: Tokenizer, pretrained: Backbone, model_cfg: ModelConfig, num_labels: int, train: pd.DataFrame,
        val: pd.DataFrame, transfer: list[tuple[Path, pd.DataFrame]], tracker: Tracker,
        world: World | None = None) -> tuple[SequenceClassifier, dict]:
    """The teacher: a classifier of ``num_labels`` outputs on the ``pretrained`` encoder (seeded by ``train.seed``),
    trained on the intermediate task's ``transfer`` splits first when there are any, then on ``train``, and selected
    on ``val``; with the metrics of both phases (curves to ``tracker``). ``world``: this process's place among several
    (its GPU, its share of each batch)."""
    world = world or World()
    cfg, task = params.finetune, params.task
    torch.manual_seed(params.train.seed)
    model = build(cfg, model_cfg, pretrained, num_labels).to(world.device())  # this rank's GPU when there is one
    model, transfer_metrics = transfer_phase(model, cfg, params.train, task, tok, transfer, tracker, world, phase="transfer")
    model, metrics = train_classifier(model, finetune_loop(cfg, params.train), encode_train(tok, train, task),
                                      validation(tok, val, task, params.train.precision), tracker, world=world,
                                      phase="finetune")
    metrics.update(transfer_metrics, processes=world.size)
    return model, metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--pretrained", type=Path, default=Path("models/pretrain/model.safetensors"))
    parser.add_argument("--out", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/finetune.json"))
    parser.add_argument("--curves", type=Path, default=Path("plots/curves/finetune.csv"),
                        help="training curves of both phases (DVC plot); the PNG goes beside it")
    args = parser.parse_args(argv)
    # mlflow only where a stage logs: the training code stays importable without it
    from pipeline.stages.common import finish_stage
    from pipeline.tracking import stage_run

    params: Params = load_params()
    world = World.from_env()  # several processes under torchrun, else one
    world.init()
    data = prepared(args.data)
    train_path, val_path = split_path(args.data, "train"), split_path(args.data, "val")
    transfer = transfer_splits(args.data)
    inputs = [train_path, val_path, *(path for path, _ in transfer), args.tokenizer, args.pretrained]
    with stage_run("finetune", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        train_df, val_df = load_split(args.data, "train"), load_split(args.data, "val")
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        tracker.log_dataset(val_df, val_path.stem, val_path, context="validation")
        for (path, df), context in zip(transfer, ("transfer training", "transfer validation")):
            tracker.log_dataset(df, path.stem, path, context=context)
        check_tokenizer(args.pretrained, tok, args.tokenizer)
        mlm, model_cfg, _ = load_model(args.pretrained)
        recorder = RecordingTracker(tracker)
        model, metrics = run(params, tok, mlm.backbone, model_cfg, data.num_labels, train_df, val_df, transfer, recorder,
                             world)
        if not world.main:  # rank 0 writes the outputs and logs the run
            return
        save_model(model, model_cfg, args.out, head_config(params.finetune, data.num_labels), vocabulary_digest(tok),
                   reads=reads(params.task, data.labels))
        curves = write_curves(recorder.history, args.curves, "task", "fine-tuning on the task")
        finish_stage(tracker, metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
