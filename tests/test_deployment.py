"""The deployment gate: a graph is checked on every inference path against torch fp32 before it is written; the
paths that pass, with their numbers, and a probe for the others go into its parity record."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_classifier, toy_texts, toy_tokenizer

from minibert.batching import pad_ids
from minibert.contract import Contract, Windows, onnx_parity, stamp_onnx, stamp_parity
from minibert.engines import PORTABLE_PATH, available_paths, load_engine
from minibert.export import export_onnx
from minibert.runtime import RuntimeConfig, TextClassifier
from minibert.tokenizer import PAD
from pipeline.deployment import MIN_AGREEMENT, PROBE_WINDOWS, TOLERANCE, gate, parity_record
from pipeline.io import StageError
from pipeline.scoring import text_logits

WINDOWS = Windows(16, 6, "mean")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("deployment")
    tok, tok_path = toy_tokenizer(tmp)
    model = toy_classifier(tok).eval()
    graph = export_onnx(model, tmp / "model.onnx")
    stamp_onnx(graph, Contract("classifier", None, WINDOWS, ("no", "yes")))
    texts = toy_texts(np.random.default_rng(7), [5, 9, 14, 30, 60] * 20)
    reference = text_logits(model, tok, WINDOWS, batch_size=8)(texts)
    labels = reference.argmax(1)  # the model's own answers as labels: the fp32 graph loses nothing
    return model, tok, tok_path, graph, texts, labels, reference


def test_the_fp32_graph_passes_on_every_path_the_host_has_with_its_numbers(toy) -> None:
    _, tok, _, graph, texts, labels, reference = toy
    verified, refused = gate(graph, tok, texts, labels, reference, threads=1)
    assert set(verified) | set(refused) == set(available_paths()) and PORTABLE_PATH in verified
    portable = verified[PORTABLE_PATH]
    assert portable["argmax_agreement"] == 1.0 and portable["accuracy_delta"] == 0.0 and portable["max_abs_diff"] < 1e-4
    for path, why in refused.items():  # a random model's near-ties may flip in bf16: refused with its numbers
        assert path.endswith("bf16") and "argmax agreement" in why


def test_a_graph_that_disagrees_with_torch_is_refused_with_the_numbers(toy) -> None:
    _, tok, _, graph, texts, labels, reference = toy
    flipped = reference[:, ::-1].copy()  # torch "answered" the other class everywhere
    with pytest.raises(StageError, match=rf"on {PORTABLE_PATH} .* argmax agreement 0\.0000 \(needs >= {MIN_AGREEMENT}\)"):
        gate(graph, tok, texts, labels, flipped, threads=1)


def test_the_parity_record_carries_the_probe_and_lets_a_host_check_an_unlisted_path(toy, tmp_path) -> None:
    import shutil

    model, tok, tok_path, graph, texts, labels, reference = toy
    record = parity_record(model, tok, texts, WINDOWS, {PORTABLE_PATH: {"argmax_agreement": 1.0}})
    assert len(record.windows) == min(PROBE_WINDOWS, len(record.windows)) and len(record.logits) == len(record.windows)
    assert record.tolerance == TOLERANCE and record.min_agreement == MIN_AGREEMENT
    copy = shutil.copy(graph, tmp_path / "recorded.onnx")
    stamp_parity(copy, record)
    read = onnx_parity(load_engine(copy).metadata, "recorded")
    assert read == record
    engine = TextClassifier.from_files(tok_path, copy, RuntimeConfig(runtime="onnxruntime", threads=1)).engine
    probe = engine(*pad_ids(record.windows[:4], tok.token_to_id(PAD)))
    np.testing.assert_allclose(probe, np.asarray(record.logits[:4]), atol=1e-4)
