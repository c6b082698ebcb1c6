"""Property-based: text -> prediction never crashes, for any Unicode (lone surrogates, control
characters, emoji, combining marks, NUL) and any length from empty to many windows beyond the
model's maximum, through both the library runtime and the served pyfunc: one valid label per
text and finite probabilities that sum to 1."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import WORDS, toy_classifier, toy_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibert.export import export_onnx
from minibert.runtime import RuntimeConfig, TextClassifier

MAX_LENGTH = 16  # tokens a window: a few words already take several windows

# every code point, with lone surrogates (valid in a Python str and in JSON, refused by tokenizers) made common
any_text = st.text(st.one_of(st.characters(codec=None, categories=None),
                             st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, codec=None, categories=None)),
                   max_size=50)
long_text = st.builds(lambda words, n: " ".join(words) * n, st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),
                      st.integers(1, 300))  # up to ~20,000 characters, hundreds of windows
texts = st.lists(st.one_of(any_text, long_text, st.just(""), st.just(" \t\n")), min_size=1, max_size=6)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("properties")
    tok, tok_path = toy_tokenizer(tmp)
    return tok_path, export_onnx(toy_classifier(tok), tmp / "model.onnx")


@pytest.fixture(scope="module")
def runtime(exported) -> TextClassifier:
    tok_path, onnx_path = exported
    return TextClassifier.from_files(tok_path, onnx_path, RuntimeConfig(max_length=MAX_LENGTH, stride=10, threads=1))


@pytest.fixture(scope="module")
def served(exported):
    pytest.importorskip("mlflow")
    from pipeline.serving_model import TextClassifierModel

    tok_path, onnx_path = exported
    model = TextClassifierModel()
    model.load_context(SimpleNamespace(artifacts={"tokenizer": str(tok_path), "onnx": str(onnx_path)},
                                      model_config={"max_length": MAX_LENGTH, "stride": 10, "aggregate": "mean", "threads": 1}))
    return model


@SETTINGS
@given(batch=texts)
def test_the_runtime_labels_any_text(runtime: TextClassifier, batch: list[str]) -> None:
    out = runtime.predict(batch)
    assert out.labels.shape == (len(batch),) and set(out.labels.tolist()) <= {0, 1}
    assert out.probabilities.shape == (len(batch), 2) and np.isfinite(out.probabilities).all()
    assert (out.probabilities >= 0).all() and np.allclose(out.probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert (out.labels == out.probabilities.argmax(axis=1)).all()


@SETTINGS
@given(batch=texts)
def test_the_served_model_labels_any_text(served, batch: list[str]) -> None:
    # a list, the pyfunc's other input: pandas 3 (arrow strings) cannot hold a lone surrogate in a DataFrame at all
    out = served.predict(None, batch)
    assert list(out.columns) == ["label", "probability", "p_0", "p_1"] and len(out) == len(batch)
    assert set(out["label"].tolist()) <= {"0", "1"}
    assert np.isfinite(out["probability"]).all() and ((out["probability"] >= 0.5) & (out["probability"] <= 1.0)).all()
