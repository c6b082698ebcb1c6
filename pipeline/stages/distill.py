"""distill: train a smaller student on the teacher's soft targets (Hinton et al. 2015 KD loss).

The teacher's logits on the training split come from the ``teacher_logits`` stage (computed
once). With ``distill.ensemble.baseline_share`` above 0 the soft targets are the teacher's
probabilities averaged with TF-IDF + LR's out-of-fold ones (stage ``baseline_oof``), and with
``distill.ensemble.cnn_share`` above 0 with a word-level CNN's (stage ``cnn``): an ensemble of
model families, distilled into one small model. With ``distill.transfer_set.rows`` above 0
the student also learns those soft targets on unlabelled in-domain texts (stage ``transfer_set``,
scored by ``teacher_logits`` and ``baseline_oof``), their argmax standing in for the label. The
student (a minibert of ``distill.student`` shape, by default 2 layers x 128 hidden) starts from
the teacher (``minibert.distill.init_student_from_teacher``: spaced layers at the same width,
projected embeddings when narrower) and is trained on alpha * T^2 * KL(teacher || student)
+ (1 - alpha) * CE, plus TinyBERT-style hidden-state and attention terms when ``hidden_weight`` /
``attention_weight`` are above 0, with the same batching, schedule and best-on-validation
selection as fine-tuning. With ``distill.student_kind: word_cnn`` the student is instead the ``cnn``
stage's word-level CNN, trained on further on the same soft targets and loss (it then reads the
ensemble through its own vocabulary of n-gram filters, as Tang et al. 2019 distil BERT into a BiLSTM),
reading its texts as the word-CNN does (``Params.student_task``: ``cnn.max_length`` / ``cnn.stride``).
With ``distill.soup`` above 1, that many word-CNN students train from the same model with successive
seeds and their weights are averaged (``minibert.soup``): the deployed model is then the seeds' mean,
not one seed's draw.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minibert.checkpoint import check_tokenizer, load_model, save_model
from minibert.textcnn import save_textcnn
from minibert.tokenizer import load_tokenizer, vocabulary_digest
from minibert.trainer import RecordingTracker
from pipeline.curves import write_curves
from pipeline.distillation import distill_transformer, load_sources, run_soup, soft_targets, with_transfer
from pipeline.params import Params, load_params
from pipeline.scoring import validation
from pipeline.splits import load_split, split_path
from pipeline.stages.common import finish_stage
from pipeline.task import encode_train_indexed
from pipeline.tracking import stage_run
from pipeline.transfer_texts import load_transfer_split


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--teacher", type=Path, default=Path("models/finetune/model.safetensors"))
    parser.add_argument("--teacher-logits", type=Path, default=Path("models/teacher_logits/train.npz"))
    parser.add_argument("--baseline-oof", type=Path, default=Path("models/baseline_oof/train.npz"))
    parser.add_argument("--transfer", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--teacher-transfer", type=Path, default=Path("models/teacher_logits/transfer.npz"))
    parser.add_argument("--baseline-transfer", type=Path, default=Path("models/baseline_oof/transfer.npz"))
    parser.add_argument("--cnn-logits", type=Path, default=Path("models/cnn/train.npz"))
    parser.add_argument("--cnn-transfer", type=Path, default=Path("models/cnn/transfer.npz"))
    parser.add_argument("--cnn-model", type=Path, default=Path("models/cnn/model.safetensors"),
                        help="the word-CNN a student_kind: word_cnn student starts from")
    parser.add_argument("--out", type=Path, default=Path("models/distill/model.safetensors"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/distill.json"))
    parser.add_argument("--curves", type=Path, default=Path("plots/curves/distill.csv"),
                        help="training curves (DVC plot); the PNG goes beside it")
    args = parser.parse_args(argv)
    params: Params = load_params()
    task = params.student_task()  # a word_cnn student reads as the word-CNN (cnn.max_length)
    train_path, val_path = split_path(args.data, task, "train"), split_path(args.data, task, "val")
    inputs = [train_path, val_path, args.transfer, args.tokenizer, args.teacher, args.teacher_logits, args.baseline_oof,
              args.cnn_logits] + ([args.cnn_model] if params.distill.student_kind == "word_cnn" else [])
    with stage_run("distill", params, inputs) as tracker:
        tok = load_tokenizer(args.tokenizer)
        check_tokenizer(args.teacher, tok, args.tokenizer)
        teacher, _, head_cfg = load_model(args.teacher)
        student_cfg = params.student_config(tok.get_vocab_size())
        train_df, val_df = load_split(args.data, task, "train"), load_split(args.data, task, "val")
        tracker.log_dataset(train_df, train_path.stem, train_path, context="training")
        sequences, labels, text_index = encode_train_indexed(tok, train_df, task)
        shares = (params.distill.ensemble.baseline_share, params.distill.ensemble.cnn_share)
        sources = load_sources(shares, (args.teacher_logits, args.baseline_oof, args.cnn_logits),
                               labels, train_df["label"].to_numpy(), text_index)
        transfer_df = load_transfer_split(args.transfer)
        tracker.log_dataset(transfer_df[["text"]], "transfer_set", args.transfer, context="training", targets=None)
        transfer, transfer_labels, transfer_index = encode_train_indexed(tok, transfer_df, task)
        transfer_sources = load_sources(shares, (args.teacher_transfer, args.baseline_transfer, args.cnn_transfer),
                                        transfer_labels, transfer_df["label"].to_numpy(), transfer_index)
        targets, transfer_targets = soft_targets(params.distill, *sources), soft_targets(params.distill, *transfer_sources)
        rows, all_targets = with_transfer((sequences, labels), targets, transfer, transfer_targets)
        recorder = RecordingTracker(tracker)
        val = validation(tok, val_df, task)
        if params.distill.student_kind == "word_cnn":
            check_tokenizer(args.cnn_model, tok, args.tokenizer)
            student, cnn_cfg, metrics = run_soup(params.distill, args.cnn_model, teacher, rows, all_targets, val, recorder,
                                                 bag_lr=params.cnn.bag_lr_scale, others_tracker=tracker)
            save_textcnn(student, cnn_cfg, args.out, vocabulary_digest(tok))
        else:
            student, metrics = distill_transformer(params.distill, teacher, head_cfg, student_cfg, rows, all_targets, val, recorder)
            save_model(student, student_cfg, args.out, head_cfg, vocabulary_digest(tok))
        metrics["soft_target_train_accuracy"] = float((targets.argmax(axis=1) == labels).mean())
        metrics["transfer_rows"] = len(transfer)
        curves = write_curves(recorder.history, args.curves, "distill", "distillation into the student")
        finish_stage(tracker, metrics, args.metrics, {args.out: "checkpoint", **dict.fromkeys(curves, "curves")})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
