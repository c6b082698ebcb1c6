"""The model card that travels with every registered version (``README.md`` in its artifacts, and
the version's description in the registry): what the model is and how it reads text (its file's
contract), the data and its digests, the provenance that leads to the params, the measured metrics,
intended use and limitations. Follows Mitchell et al. 2019
("Model Cards for Model Reporting"), cut to what a pipeline run actually knows.
"""

from __future__ import annotations

from typing import Any

from minibert.contract import Contract
from pipeline.document import Block, Heading, Table, Text

DEPLOYED = "student_onnx_int8"  # the evaluate variant the register stage registers and the report presents
PUBLISHED = "BERT-Tiny 83.2 and BERT-Mini 85.9 SST-2 dev accuracy after full pretraining (Turc et al. 2019)"


def _pct(value: Any) -> str:
    return f"{100 * value:.2f}" if isinstance(value, (int, float)) else "n/a"


def card_blocks(
    name: str, contract: Contract, vocab_size: int, task: str, version: str | None, deployed: str,
    evaluation: dict[str, dict[str, float]], data_report: dict[str, Any], digests: dict[str, str], provenance: dict[str, str],
) -> list[Block]:
    """The card of the deployed model ``contract`` describes (its windows and labels), registered as ``name``."""
    windows = contract.windows
    model = evaluation[deployed]
    rows = data_report.get("rows", {})
    return [
        Heading(f"{name}, version {version}" if version else f"{name}: minibert sentiment classifier", 1),
        Text(f"Sentiment classifier ({', '.join(f'{i} = {label}' for i, label in enumerate(contract.labels))}) for English movie-review text. What is "
             f"registered is the deployed chain: the student distilled from the fine-tuned minibert teacher, exported to "
             f"ONNX with fused attention and int8 weights, with its WordPiece tokenizer, as an MLflow pyfunc: raw text in, "
             f"label and probability out. Texts longer than {windows.max_length} tokens are read through sliding windows "
             f"(stride {windows.stride}, window logits aggregated by {windows.aggregate}), as the model file records."),
        Heading("Intended use"),
        Text(f"Sentiment of English movie reviews, sentence-level ({task} is the task of record) or whole reviews, "
             "for analytics, triage and as a fast baseline; CPU serving at batch 1. Not for decisions about people, "
             "and not as the only signal where a wrong label is costly."),
        Heading("Limitations"),
        Text("Trained and evaluated on movie reviews only: other domains (products, social media, news) will score "
             "lower, unmeasured. English only; a lowercased vocabulary of "
             f"{vocab_size} WordPiece tokens. Two classes: no neutral answer, so mixed or neutral "
             "text is forced to one side; negation, sarcasm and contrast (\"but\") are the usual mistakes (the run's "
             f"report lists the most confident ones). Probabilities are not calibrated after training: expected "
             f"calibration error {model.get('ece', float('nan')):.3f} on the test split. For scale: {PUBLISHED}."),
        Heading("Metrics on the test split of record"),
        Table(("variant", "accuracy %", "F1 %", "ECE", "p50 ms (1 thread)", "size MB"),
              tuple((v, _pct(m.get("accuracy")), _pct(m.get("f1")), f"{m.get('ece', float('nan')):.3f}",
                     f"{m.get('p50_ms', float('nan')):.2f}", f"{m.get('size_mb', float('nan')):.2f}")
                    for v, m in evaluation.items())),
        Text(f"This version is {deployed}; baseline is TF-IDF + logistic regression on the same training rows."),
        Heading("Data"),
        Table(("split", "rows"), tuple((k, str(v)) for k, v in sorted(rows.items()))),
        Table(("raw data", "digest (DVC md5)"), tuple(sorted(digests.items()))),
        Heading("Provenance"),
        Text("The params that made it are those of the git commit below (params.yaml and the profile overlay, "
             "recorded in its dvc.lock), logged on the pipeline run's MLflow runs."),
        Table(("", ""), tuple(provenance.items())),
        Heading("Model file"),
        Table(("", ""), (("kind", contract.kind), ("labels", ", ".join(contract.labels)),
                         ("windows", f"{windows.max_length} tokens, stride {windows.stride}, {windows.aggregate}"),
                         ("vocabulary sha256", contract.vocabulary_sha256 or "n/a"))),
    ]

