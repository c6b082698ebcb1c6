"""pretrain: masked-language-model pretraining of the encoder on the corpus (``pipeline.pretraining``).

Writes the encoder with its MLM head, the held-out masked-token accuracy and loss, and the
training curves; a killed run resumes from ``--resume``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minibert.checkpoint import save_model
from minibert.distributed import World
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import Checkpointer, RecordingTracker
from pipeline.curves import write_curves
from pipeline.io import read_table
from pipeline.params import Params, load_params
from pipeline.pretraining import run
from pipeline.provenance import resume_fingerprint


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("data/prepared/corpus.parquet"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--out", type=Path, default=Path("models/pretrain/model.safetensors"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/pretrain.json"))
    parser.add_argument("--curves", type=Path, default=Path("plots/curves/pretrain.csv"),
                        help="training curves (DVC plot); the PNG goes beside it")
    parser.add_argument("--resume", type=Path, default=Path(".minibert/resume/pretrain.pt"),
                        help="resumable training state (not a DVC output: it survives a killed run)")
    args = parser.parse_args(argv)
    # mlflow only where a stage logs: the training code stays importable without it
    from pipeline.stages.common import finish_stage
    from pipeline.tracking import project_root, stage_run

    params: Params = load_params()
    world = World.from_env()  # several processes under torchrun, else one
    world.init()
    tok = load_tokenizer(args.tokenizer)
    model_cfg = params.model_config(tok.get_vocab_size())
    with stage_run("pretrain", params, [args.corpus, args.tokenizer]) as tracker:
        corpus = read_table(args.corpus, ["text"])
        tracker.log_dataset(corpus, "corpus", args.corpus, context="pretraining", targets=None)
        fingerprint = resume_fingerprint("pretrain", params, [args.corpus, args.tokenizer], project_root())
        checkpointer = Checkpointer(args.resume, fingerprint)
        recorder = RecordingTracker(tracker)
        model, metrics = run(params.pretrain, params.train, model_cfg, tok, corpus["text"].tolist(), recorder, checkpointer, world)
        if not world.main:  # rank 0 writes the outputs and logs the run
            return
        save_model(model, model_cfg, args.out, vocabulary=vocabulary_digest(tok))
        curves = write_curves(recorder.history, args.curves, "pretrain", "MLM pretraining")
        finish_stage(tracker, metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
