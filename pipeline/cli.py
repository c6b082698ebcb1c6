"""The ``minibert`` command line: run the pipeline, fetch data, inspect presets, and work the
model registry (promote, rollback, predict).

``minibert pipeline`` is what ``make pipeline`` runs: fetch the raw data (``dvc pull`` from the
mirror remote, or the Hugging Face Hub when ``data.source: hub``), open one MLflow parent run,
run ``dvc repro`` (every stage joins the parent), and print each stage's time and the dev
accuracies. ``promote`` / ``rollback`` move the ``champion`` alias through the gate in
``pipeline/promotion.py``; ``predict`` labels texts with a registered model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from minibert.config import PRESETS
from pipeline.io import DataError, text_lines
from pipeline.model_card import DEPLOYED


def count_parameters(name: str) -> tuple[int, int]:
    """(all, non-embedding) parameter counts of a preset's MLM model."""
    from minibert.model import build_mlm, parameter_counts  # torch, only for the commands that build a model

    return parameter_counts(build_mlm(PRESETS[name]))


def cmd_presets(args: argparse.Namespace) -> int:
    print(f"{'preset':<8}{'layers':>7}{'hidden':>8}{'heads':>7}{'params (M)':>12}{'non-emb (M)':>13}")
    for name, cfg in PRESETS.items():
        total, non_embedding = count_parameters(name)
        print(f"{name:<8}{cfg.num_layers:>7}{cfg.hidden_size:>8}{cfg.num_heads:>7}{total / 1e6:>12.2f}{non_embedding / 1e6:>13.2f}")
    return 0


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from pipeline.orchestration import fetch_data
    from pipeline.params import load_params

    fetch_data(load_params().data)
    return 0


PROFILE_HEADER = ("# The active profile: what it changes of params.yaml, section by section ({} = the defaults). Written by\n"
                  "# `minibert pipeline --profile NAME` from profiles/NAME.yaml; each stage tracks the sections it reads.\n")


def profile_text(overlay: dict, params_file: Path = Path("params.yaml")) -> str:
    """profile.yaml's text: the overlay with every section of params.yaml present (empty where it changes
    nothing), so that each stage can track exactly the sections it reads (DVC refuses a missing key)."""
    import yaml

    sections = yaml.safe_load(params_file.read_text()) or {}
    padded = {name: overlay.get(name) or {} for name in sections}
    return PROFILE_HEADER + yaml.safe_dump(padded, sort_keys=False, default_flow_style=None, width=110)


def use_profile(name: str, profile_file: Path = Path("profile.yaml")) -> None:
    """Make ``profiles/<name>.yaml`` (or a path) the active overlay, ``profile.yaml``, atomically, after
    validating it over params.yaml; ``default`` clears it. params.yaml is never written."""
    import yaml

    from pipeline.io import atomic_path
    from pipeline.params import load_params

    if name == "default":
        source, text = None, profile_text({})
    else:
        source = Path(name) if name.endswith((".yaml", ".yml")) else Path("profiles") / f"{name}.yaml"
        if not source.is_file():
            known = sorted(p.stem for p in Path("profiles").glob("*.yaml"))
            raise FileNotFoundError(f"profile {source} not found; known profiles: {['default', *known]} (or pass a .yaml path)")
        load_params(profile=source)  # errors name the profile file and the key
        text = profile_text(yaml.safe_load(source.read_text()) or {})
    if profile_file.is_file() and profile_file.read_text() == text:
        return
    with atomic_path(profile_file) as tmp:
        tmp.write_text(text)
    print(f"{profile_file} <- {source or 'the defaults'} (params.yaml unchanged; `--profile default` returns to the defaults)")


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pipeline import data_change
    from pipeline.deadline import verdict
    from pipeline.orchestration import fetch_data, run_pipeline
    from pipeline.params import load_params

    if args.profile:
        use_profile(args.profile)
    params = load_params()
    started = time.time()  # Unix time: the deadline's clock too
    fetch_data(params.data)
    result = run_pipeline(params, force=args.force, started=started)
    total = time.time() - started
    print(f"\npipeline run {result.run_id}: {total:.0f} s in all")
    if (line := verdict(params, total)) is not None:
        print(line)
    for stage, seconds in result.stage_seconds.items():
        print(f"  {stage:<14} {seconds:8.1f} s")
    print(data_change.summary(result.data_change))
    evaluation = Path("metrics/evaluate.json")
    if evaluation.is_file():
        print(f"\n{params.data.dataset} accuracy on the test split of record:")
        for variant, row in json.loads(evaluation.read_text()).items():
            print(f"  {variant:<18} {row['accuracy']:.4f}")
    return 0


def cmd_retrain(args: argparse.Namespace) -> int:
    from pipeline.flows import retrain_flow

    outcome = retrain_flow(force=args.force)
    print(f"stages run: {', '.join(outcome['stage_seconds']) or 'none'}")
    print(outcome["data"])
    print(f"{'promoted' if outcome['promoted'] else 'refused'}: {outcome['reason']}")
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from pipeline.flows import schedule

    schedule(args.name, args.cron, args.timezone, args.force)
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    from pipeline.params import load_params
    from pipeline.promotion import promote_with_params
    from pipeline.tracking import project_root

    decision = promote_with_params(load_params(), args.data, args.version, project_root())
    print(f"{'promoted' if decision.promote else 'refused'}: {decision.reason}")
    return 0 if decision.promote or not args.strict else 1


def cmd_rollback(args: argparse.Namespace) -> int:
    from pipeline.params import load_params
    from pipeline.promotion import rollback
    from pipeline.tracking import project_root

    params = load_params()
    version = rollback(params.register.model_name, params.tracking.experiment, project_root())
    print(f"champion -> version {version}")
    return 0


def confidence(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a probability; give a number from 0 to 1, e.g. 0.6")
    return number


def cmd_predict(args: argparse.Namespace) -> int:
    import pandas as pd

    from pipeline.params import load_params
    from pipeline.tracking import configure, project_root, served_predict

    params = load_params()
    texts = list(args.texts)
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise DataError(f"text argument {number} is empty; give it words to classify (or leave it out)")
    if args.file is not None:
        if not args.file.is_file():
            raise FileNotFoundError(f"{args.file}: no such file (one text a line)")
        texts += [line for _, line in text_lines(args.file) if line.strip()]  # blank lines separate nothing
    if not texts:
        raise DataError("nothing to predict: give texts as arguments or --file with one text a line")
    configure(params.tracking.experiment, project_root())
    predict = served_predict(f"models:/{params.register.model_name}@{args.alias}")
    out = predict(pd.DataFrame({"text": texts}), params={"min_confidence": args.min_confidence})
    classes = [c for c in out.columns if c.startswith("p_")]
    for i, text in enumerate(texts):  # label, its probability, every class's, the text: tab-separated
        every = " ".join(f"{c[2:]}={out[c].iloc[i]:.4f}" for c in classes)
        print(f"{out['label'].iloc[i]}\t{out['probability'].iloc[i]:.4f}\t{every}\t{text}")
    return 0


def cmd_attention(args: argparse.Namespace) -> int:
    from minibert.checkpoint import check_tokenizer, header, load_model
    from minibert.tokenizer import load_tokenizer
    from pipeline.attention import sentence_pictures

    if not args.text.strip():
        raise DataError("the text to draw is empty; give a sentence, e.g. minibert attention \"a gripping film .\"")
    if (args.layer is None) != (args.head is None):
        raise DataError(f"--layer {args.layer} --head {args.head}: give both for one head, or neither for every head")
    tok = load_tokenizer(args.tokenizer)
    check_tokenizer(args.model, tok, args.tokenizer)
    if header(args.model)["kind"] == "textcnn":
        raise DataError(f"{args.model} is a word-CNN: it has no attention to draw; pass a minibert checkpoint such as "
                        "the teacher, models/finetune/model.safetensors")
    model, cfg, _ = load_model(args.model)
    default = "attention.png" if args.layer is None else f"attention_L{args.layer}H{args.head}.png"
    out = sentence_pictures(model, tok, args.text, min(args.max_length, cfg.max_positions), args.out or Path(default),
                            args.layer, args.head)
    print(out)
    return 0


def prepare_params():  # noqa: ANN201 - PrepareParams, imported late like every command's own needs
    """The project's ``prepare`` section (how missing splits are carved), or its defaults outside a project."""
    from pipeline.params import PrepareParams, load_params

    return load_params().prepare if Path("params.yaml").is_file() else PrepareParams()


def cmd_data_add(args: argparse.Namespace) -> int:
    from pipeline.intake import add, add_from_hub
    from pipeline.orchestration import tool_env

    names = None if args.labels is None else [n.strip() for n in args.labels.split(",")]
    if args.hub is not None:
        if args.files:
            raise DataError("give files or --hub, not both")
        checked = add_from_hub(args.hub, args.revision, args.text, args.label, args.name, names, args.group,
                               prepare_params(), args.strict, dvc_env=tool_env())
    else:
        checked = add(args.files, args.text, args.label, args.name, names, args.group, prepare_params(), args.strict,
                      dvc_env=tool_env())
    name = checked.spec.name
    print(checked.summary)
    print(f"added: data/raw/{name}/ (DVC-tracked: data/raw/{name}.dvc) and datasets/{name}.yaml; commit both, `dvc push` "
          f"the data, and train on it with data.dataset: {name} (in a profile: profiles/<name>.yaml)")
    return 0


def cmd_data_append(args: argparse.Namespace) -> int:
    from pipeline.intake import append
    from pipeline.orchestration import tool_env

    checked = append(args.name, args.files, prepare_params(), args.strict, dvc_env=tool_env())
    folder = f"data/raw/{checked.spec.files.train[0].split('/')[0]}"
    print(checked.summary)
    print(f"appended to {folder}/ (DVC-tracked: {folder}.dvc) and listed in datasets/{args.name}.yaml; commit both, "
          "`dvc push` the data, and `minibert retrain` reruns what the new data changes and runs the promotion gate")
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from pipeline import datasets
    from pipeline.intake import check
    from pipeline.params import load_params

    name = args.name or load_params().data.dataset
    print(check(datasets.load(name), prepare_params(), datasets.RAW, args.strict).summary)
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from pipeline.params import load_params
    from pipeline.tracking import configure, lineage, project_root

    configure(load_params().tracking.experiment, project_root())
    print(json.dumps(lineage(args.model_uri), indent=2, default=str))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from pipeline.params import load_params
    from pipeline.tracking import configure, project_root, recent_pipeline_runs

    params = load_params()
    configure(params.tracking.experiment, project_root())
    rows = recent_pipeline_runs(params.tracking.experiment, args.limit)
    if not rows:
        print(f"no pipeline runs in experiment {params.tracking.experiment!r} yet; run `minibert pipeline`")
        return 0
    print(f"{'started (UTC)':<17} {'status':<9} {'commit':<8} {'entry':<8} {'teacher':>8} {'deployed':>9} {'deployed/s':>11}  run")
    for row in rows:
        started = datetime.fromtimestamp(row["start_time"] / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M")
        m = row["metrics"]
        cells = [f"{m[k]:.4f}" if k in m else "-" for k in ("teacher.accuracy", f"{DEPLOYED}.accuracy")]
        speed = f"{m[f'{DEPLOYED}.throughput_per_s']:.0f}" if f"{DEPLOYED}.throughput_per_s" in m else "-"
        print(f"{started:<17} {row['status']:<9} {row['git_commit'][:7]:<8} {row['entry']:<8} {cells[0]:>8} "
              f"{cells[1]:>9} {speed:>11}  {row['run_id']}")
    return 0


def strict_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true", help="refuse duplicate texts and test texts also in train")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibert", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list model presets and their sizes").set_defaults(func=cmd_presets)
    sub.add_parser("fetch-data", help="pull the raw data (DVC mirror or Hugging Face Hub, per params.yaml)").set_defaults(
        func=cmd_fetch_data
    )
    run = sub.add_parser("pipeline", help="fetch data, then dvc repro under one MLflow parent run")
    run.add_argument("--force", action="store_true", help="rerun every stage even if DVC finds it up to date")
    run.add_argument("--profile", help="make profiles/PROFILE.yaml (e.g. imdb, tiny; default: none) the active overlay "
                     "(profile.yaml) first; params.yaml is never written")
    run.set_defaults(func=cmd_pipeline)
    retrain = sub.add_parser("retrain", help="retrain once as a Prefect flow: fetch data, dvc repro, then the promotion gate")
    retrain.add_argument("--force", action="store_true", help="rerun every stage even if DVC finds it up to date")
    retrain.set_defaults(func=cmd_retrain)
    schedule = sub.add_parser(
        "schedule", help="serve the retrain flow as a Prefect deployment on a cron schedule (needs a Prefect server)",
        description="Serve the retrain flow as deployment minibert-retrain/NAME on a cron schedule until stopped "
                    "(SIGTERM or Ctrl-C), one run at a time. Needs a Prefect server: `prefect server start --host "
                    "127.0.0.1 --port 4200` and PREFECT_API_URL=http://127.0.0.1:4200/api. Trigger a run at once "
                    "with `prefect deployment run minibert-retrain/NAME`.")
    schedule.add_argument("--cron", default="0 3 * * 0", help="when to retrain (default: weekly, Sundays 03:00)")
    schedule.add_argument("--timezone", default="UTC", help="IANA time zone of --cron (default: UTC)")
    schedule.add_argument("--name", default="weekly", help="deployment name (default: weekly)")
    schedule.add_argument("--force", action="store_true", help="every run reruns every stage")
    schedule.set_defaults(func=cmd_schedule)
    promote = sub.add_parser("promote", help="score challenger vs champion on the test split; move 'champion' if it wins")
    promote.add_argument("--version", help="the version to try (default: the 'challenger' alias)")
    promote.add_argument("--data", type=Path, default=Path("data/prepared"))
    promote.add_argument("--strict", action="store_true", help="exit 1 when the challenger is refused")
    promote.set_defaults(func=cmd_promote)
    sub.add_parser("rollback", help="point 'champion' back at the version it replaced").set_defaults(func=cmd_rollback)
    predict = sub.add_parser("predict", help="label texts with a registered model (default: the champion)")
    predict.add_argument("texts", nargs="*", help="texts to label")
    predict.add_argument("--file", type=Path, help="a UTF-8 file with one text a line")
    predict.add_argument("--alias", default="champion", help="registry alias to load (champion, challenger)")
    predict.add_argument("--min-confidence", type=confidence, default=0.0, metavar="P",
                         help="answer 'abstain' where the top class's (calibrated) probability is below P (0 to 1; "
                              "default 0: always a class)")
    predict.set_defaults(func=cmd_predict)
    attention = sub.add_parser(
        "attention", help="draw a trained model's attention on a sentence: every head as a grid, or one head",
        description="Draw where each attention head of a trained model looks, for one sentence: a PNG with the tokens "
                    "on both axes (query tokens down, key tokens across). Without --layer / --head, every head of every "
                    "layer as a grid. Prints the PNG's path.")
    attention.add_argument("text", help="the sentence")
    attention.add_argument("--layer", type=int, help="layer (from 0); with --head draws that head alone")
    attention.add_argument("--head", type=int, help="head (from 0); with --layer")
    attention.add_argument("--model", type=Path, default=Path("models/finetune/model.safetensors"),
                           help="a minibert checkpoint (default: the fine-tuned teacher)")
    attention.add_argument("--tokenizer", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    attention.add_argument("--max-length", type=int, default=64, help="tokens drawn at most, [CLS] and [SEP] included")
    attention.add_argument("--out", type=Path, help="PNG to write (default: attention.png, or attention_L<l>H<h>.png)")
    attention.set_defaults(func=cmd_attention)
    data = sub.add_parser("data", help="bring your own labelled texts in (add), later drops of them (append), re-validate (check)")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    add = data_sub.add_parser(
        "add", help="validate files, copy them to data/raw/NAME/, dvc add them, write datasets/NAME.yaml",
        description="Add a labelled dataset: CSV, TSV, JSON Lines or Parquet files (gzipped or not) whose names start "
                    "with train, validation (or dev) or test; a missing validation or test split is carved from train "
                    "by a hash of the text. Every row is checked first; on any error nothing is written.")
    add.add_argument("files", nargs="*", type=Path, help="the files, e.g. train.csv test.csv")
    add.add_argument("--hub", metavar="ID", help="instead of files: a dataset datasets.load_dataset reads (a Hub id, or "
                                                 "a local folder), its splits exported as train.parquet, test.parquet, ...")
    add.add_argument("--revision", help="with --hub: the Hub revision (commit sha or tag) to pin")
    add.add_argument("--text", required=True, help="the column holding the text")
    add.add_argument("--label", required=True, help="the column holding the label")
    add.add_argument("--name", help="the dataset's name (default: the first file's folder name)")
    add.add_argument("--labels", help="class names, comma-separated: integer labels' names in numeric order, or the "
                                      "order of string labels (default: the values, sorted)")
    add.add_argument("--group", help="a column whose equal values stay on one side of a carved split")
    strict_option(add)
    add.set_defaults(func=cmd_data_add)
    append = data_sub.add_parser(
        "append", help="a drop of new labelled rows: validate it, copy it beside the dataset's files, dvc add, list it",
        description="Append new labelled rows to an added dataset: files named train* (or validation*, where the "
                    "dataset has validation files) with the description's columns and classes. The test split of "
                    "record stays fixed. Every row is checked first; on any error nothing is written.")
    append.add_argument("name", help="the dataset (datasets/NAME.yaml)")
    append.add_argument("files", nargs="+", type=Path, help="the new files, e.g. train-2026-12.csv")
    strict_option(append)
    append.set_defaults(func=cmd_data_append)
    check = data_sub.add_parser("check", help="re-validate a dataset's files as prepare reads them")
    check.add_argument("name", nargs="?", help="the dataset (default: the active data.dataset)")
    strict_option(check)
    check.set_defaults(func=cmd_data_check)
    lineage = sub.add_parser("lineage", help="git commit, data digests, params and metrics behind a registered model")
    lineage.add_argument("model_uri", help="models:/<name>/<version> or models:/<name>@<alias>")
    lineage.set_defaults(func=cmd_lineage)
    runs = sub.add_parser("runs", help="recent pipeline runs with their key metrics")
    runs.add_argument("--limit", type=int, default=10)
    runs.set_defaults(func=cmd_runs)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pipeline.runner import run_main

    args = build_parser().parse_args(argv)
    try:
        return run_main(lambda: args.func(args), exit=False)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
