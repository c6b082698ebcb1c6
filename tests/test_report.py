"""The run report and the model card: their documents render to Markdown and self-contained HTML,
the example lists pick the right rows, and the card carries the data digests, metrics and use."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from minibert.contract import Contract, Windows
from pipeline.document import Figure, Heading, Table, Text, to_html, to_markdown
from pipeline.model_card import card_blocks
from pipeline.params import load_params
from pipeline.progress import enabled
from pipeline.stages.report import examples, results_table

ROOT = Path(__file__).resolve().parent.parent
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def test_markdown_links_images_relative_and_html_embeds_them(tmp_path: Path) -> None:
    image = tmp_path / "plots" / "chart.png"
    image.parent.mkdir()
    image.write_bytes(PNG)
    blocks = [Heading("run <1>", 1), Text("a | b & c"), Table(("k", "v"), (("x|y", "<b>"),)), Figure(image, "the chart")]
    md = to_markdown(blocks, tmp_path / "reports")
    assert md.startswith("# run <1>\n")
    assert "![the chart](../plots/chart.png)" in md
    assert "| x\\|y | <b> |" in md, "a pipe inside a cell is escaped"
    page = to_html(blocks, "report")
    assert base64.b64encode(PNG).decode() in page, "the image travels inside the page"
    assert "run &lt;1&gt;" in page and "&lt;b&gt;" in page and "a | b &amp; c" in page, "text is escaped, not markup"
    assert "src='../" not in page and "http" not in page, "nothing to fetch: opens offline"


def test_examples_pick_confident_mistakes_confident_hits_and_unsure_rows() -> None:
    test = pd.DataFrame({"text": [f"text {i}" for i in range(6)], "label": [1, 0, 1, 0, 1, 0]})
    p = np.array([0.02, 0.97, 0.55, 0.1, 0.99, 0.6])  # P(class 1)
    predictions = pd.DataFrame({"row": range(6), "label": test["label"], "pred_student_onnx_int8": (p >= 0.5).astype(int),
                                "p_student_onnx_int8": np.maximum(p, 1 - p)})
    lists = examples(test, predictions, "student_onnx_int8", 2)
    mistakes = lists["most confident mistakes"]
    assert mistakes["text"].tolist() == ["text 0", "text 1"], "0.98 and 0.97 sure, both wrong"
    assert mistakes["confidence"].tolist() == pytest.approx([0.98, 0.97])
    assert lists["most confident right answers"]["text"].tolist() == ["text 4", "text 3"]
    assert lists["least sure"]["text"].tolist() == ["text 2", "text 5"]


def test_results_table_compares_every_variant_with_the_baseline() -> None:
    evaluation = {"baseline": {"accuracy": 0.80, "macro_f1": 0.8, "ece": 0.05, "p50_ms": 0.2, "size_mb": 9.0},
                  "student_onnx_int8": {"accuracy": 0.8125, "macro_f1": 0.81, "ece": 0.03, "p50_ms": 0.3, "size_mb": 1.6}}
    table = results_table(evaluation)
    assert table.rows[1][0] == "student_onnx_int8" and table.rows[1][-1] == "+1.25"
    assert table.rows[0][-1] == "+0.00" and table.rows[1][7] == "n/a", "throughput not measured: said so, not zero"


def test_results_table_names_the_precision_a_torch_variant_was_scored_in() -> None:
    evaluation = {"baseline": {"accuracy": 0.8}, "teacher": {"accuracy": 0.82, "bf16_autocast": 1.0},
                  "student": {"accuracy": 0.83, "bf16_autocast": 0.0}, "student_onnx": {"accuracy": 0.83}}
    what = {row[0]: row[1] for row in results_table(evaluation).rows}
    assert what["teacher"] == "fine-tuned encoder, torch bf16 autocast"
    assert what["student"] == "distilled student, torch fp32"
    assert what["student_onnx"] == "student, ONNX Runtime fp32"


def test_model_card_has_data_digests_metrics_use_and_limitations() -> None:
    """The card reads how the model reads text from the model file's contract, not from params."""
    params = load_params(ROOT / "params.yaml")
    contract = Contract("textcnn", "f00d", Windows(512, 448, "max"), ("negative", "positive"))
    evaluation = {"baseline": {"accuracy": 0.8, "macro_f1": 0.8, "ece": 0.04, "p50_ms": 0.2, "size_mb": 9.0},
                  "student_onnx_int8": {"accuracy": 0.8119, "macro_f1": 0.82, "ece": 0.031, "p50_ms": 0.31, "size_mb": 1.61}}
    blocks = card_blocks(params.register.model_name, contract, 600, "sst2", "7", "student_onnx_int8", evaluation,
                         {"rows": {"train": 63_000}, "classes_per_split": {"test": {"negative": 428, "positive": 444}}},
                         {"data/raw/sst2": "md5:abc123.dir"}, {"git commit": "deadbeef"})
    md = to_markdown(blocks, Path("."))
    assert md.startswith(f"# {params.register.model_name}, version 7")
    for needle in ("## Intended use", "## Limitations", "md5:abc123.dir", "| train | 63000 |", "81.19",
                   "| git commit | deadbeef |", "0.031", "| 0 | negative | 428 |", "| 1 | positive | 444 |", "longer than 512 tokens",
                   "stride 448", "aggregated by max", "| windows | 512 tokens, stride 448, max |", "| kind | textcnn |",
                   "vocabulary of 600 WordPiece"):
        assert needle in md, needle
    unversioned = to_markdown(card_blocks(params.register.model_name, contract, 600, "sst2", None, "student_onnx_int8",
                                          evaluation, {}, {}, {}), Path("."))
    assert unversioned.startswith(f"# {params.register.model_name}: minibert text classifier")


@pytest.mark.parametrize(("env", "tty", "shown"), [
    ({}, True, True), ({}, False, False), ({"CI": "true"}, True, False),
    ({"MINIBERT_PROGRESS": "1", "CI": "true"}, False, True), ({"MINIBERT_PROGRESS": "0"}, True, False),
])
def test_progress_bars_show_on_a_terminal_only_unless_forced(monkeypatch: pytest.MonkeyPatch, env: dict, tty: bool,
                                                             shown: bool) -> None:
    for key in ("CI", "MINIBERT_PROGRESS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("sys.stderr.isatty", lambda: tty)
    assert enabled() is shown


def test_examples_tolerate_a_variant_with_no_mistakes() -> None:
    test = pd.DataFrame({"text": ["a", "b"], "label": [1, 0]})
    predictions = pd.DataFrame({"row": [0, 1], "label": [1, 0], "pred_student_onnx_int8": [1, 0],
                                "p_student_onnx_int8": np.array([0.9, 0.8])})
    assert examples(test, predictions, "student_onnx_int8", 5)["most confident mistakes"].empty


def test_informative_word_flags_mark_every_piece_of_a_lexicon_word(stage_project: Path) -> None:
    from minibert.tokenizer import load_tokenizer
    from pipeline.attention import encode_sentences

    tok = load_tokenizer(stage_project / "models" / "tokenizer.json")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # a caller's setting must not turn padding into tokens
    ids, mask, tokens, flags = encode_sentences(tok, ["an unwatchable mess .", "fine"], 64, {"unwatchable", "fine"})
    first = tokens[0]
    assert first[0] == "[CLS]" and first[-1] == "[SEP]" and "[PAD]" not in tokens[1]
    assert "".join(t.removeprefix("##") for t, f in zip(first, flags[0]) if f) == "unwatchable"
    assert int(mask[1].sum()) == len(tokens[1]) and flags[1, 1 : len(tokens[1]) - 1].all()
    assert ids.shape == (2, len(first)) and not flags[1, len(tokens[1]):].any()
