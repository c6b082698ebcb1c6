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
    test_counts = data_report.get("classes_per_split", {}).get("test", {})
    return [
        Heading(f"{name}, version {version}" if version else f"{name}: minibert text classifier", 1),
        Text(f"Text classifier trained on the dataset {task!r}: {len(contract.labels)} classes. What is registered is the "
             f"deployed chain: the student distilled from the fine-tuned minibert teacher and its sources, exported to "
             f"ONNX with int8 weights, with its WordPiece tokenizer, as an MLflow pyfunc: raw text in, the label name and "
             f"every class's probability out. Texts longer than {windows.max_length} tokens are read through sliding "
             f"windows (stride {windows.stride}, window logits aggregated by {windows.aggregate}), as the model file records. "
             f"Its probabilities are calibrated on the validation split (logits divided by {contract.temperature:.3f}); "
             "the inference param min_confidence makes it answer 'abstain' below a probability."),
        Heading("Classes"),
        Table(("index", "class", "test rows"),
              tuple((str(i), label, str(test_counts.get(label, "n/a"))) for i, label in enumerate(contract.labels))),
        Heading("Intended use"),
        Text(f"Texts like those of {task!r}'s training split, for triage, routing and analytics; CPU serving at batch 1. "
             "Not for decisions about people, and not as the only signal where a wrong label is costly."),
        Heading("Limitations"),
        Text("Measured on the dataset's own test split only: text from another source or time will score lower, "
             f"unmeasured. A lowercased vocabulary of {vocab_size} WordPiece tokens learnt from the dataset's texts. "
             "The classes are those listed: a text that belongs to none is forced into one (serving's confidence "
             "threshold can answer \"abstain\" instead). The run's report lists the most confident mistakes. Expected "
             f"calibration error {model.get('ece', float('nan')):.3f} on the test split."),
        Heading("Metrics on the test split of record"),
        Table(("variant", "accuracy %", "macro-F1 %", "ECE", "p50 ms (1 thread)", "size MB"),
              tuple((v, _pct(m.get("accuracy")), _pct(m.get("macro_f1")), f"{m.get('ece', float('nan')):.3f}",
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
                         ("vocabulary sha256", contract.vocabulary_sha256 or "n/a"),
                         ("temperature", f"{contract.temperature:.4f}"))),
    ]
