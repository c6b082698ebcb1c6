"""The registered pyfunc reads texts exactly as the evaluate stage does (sliding windows, aggregation)."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import toy_classifier, toy_texts, toy_tokenizer

from minibert import ClassifierConfig
from minibert.engines import load_session
from minibert.export import export_onnx, session_callable
from pipeline.params import TaskParams
from pipeline.scoring import text_logits

pytest.importorskip("mlflow")
from pipeline.serving_model import TextClassifierModel  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("serving")
    rng = np.random.default_rng(0)
    tok, tok_path = toy_tokenizer(tmp)
    model = toy_classifier(tok, pooling=ClassifierConfig().pooling)
    onnx_path = export_onnx(model, tmp / "model.onnx")
    task = TaskParams(max_length=16, stride=6, aggregate="mean")
    context = SimpleNamespace(artifacts={"tokenizer": str(tok_path), "onnx": str(onnx_path)},
                              model_config={"max_length": 16, "stride": 6, "aggregate": "mean", "threads": 1})
    pyfunc = TextClassifierModel()
    pyfunc.load_context(context)
    texts = toy_texts(rng, (3, 15, 40, 90))  # one to many windows
    return pyfunc, model, tok, task, onnx_path, texts


def test_served_logits_equal_the_evaluate_stage_on_long_texts(served) -> None:
    pyfunc, model, tok, task, onnx_path, texts = served
    expected = text_logits(session_callable(load_session(onnx_path, threads=1)), tok, task, batch_size=8)(texts)
    np.testing.assert_allclose(pyfunc.logits(texts), expected, atol=1e-5)
    torch_logits = text_logits(model, tok, task, batch_size=8)(texts)
    np.testing.assert_allclose(pyfunc.logits(texts), torch_logits, atol=1e-4)


def test_the_served_model_loads_and_answers_without_torch(served, tmp_path) -> None:
    """The serving environment has no torch: the pyfunc and the minibert modules it serves through import none."""
    import json
    import subprocess
    import sys

    _, _, _, _, onnx_path, texts = served
    tok_path = onnx_path.parent / "tokenizer.json"
    script = f"""
import sys, json
sys.modules["torch"] = None  # any import of torch now fails
from types import SimpleNamespace
from pipeline.serving_model import TextClassifierModel
model = TextClassifierModel()
model.load_context(SimpleNamespace(artifacts={{"tokenizer": {str(tok_path)!r}, "onnx": {str(onnx_path)!r}}},
                                   model_config={{"max_length": 16, "stride": 6, "threads": 1}}))
print(json.dumps(model.predict(None, {texts!r})["label"].tolist()))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    pyfunc = served[0]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == pyfunc.predict(None, texts)["label"].tolist()


def test_the_loaded_model_names_the_path_it_serves_on(served, capsys) -> None:
    """One stderr line at load names the inference path (``auto``'s pick on this host, or the one asked for), so a
    server's log says what answers."""
    from minibert.engines import PORTABLE_PATH, available_paths
    from pipeline.serving_model import SERVING_LINE

    *_, onnx_path, _ = served
    artifacts = {"tokenizer": str(onnx_path.parent / "tokenizer.json"), "onnx": str(onnx_path)}
    for config, expected in (({"threads": 1}, None), ({"threads": 1, "runtime": "onnxruntime"}, PORTABLE_PATH)):
        pyfunc = TextClassifierModel()
        pyfunc.load_context(SimpleNamespace(artifacts=artifacts, model_config={"max_length": 16, "stride": 6, **config}))
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(SERVING_LINE)]
        assert lines == [f"{SERVING_LINE} {pyfunc.classifier.path} (runtime {config.get('runtime', 'auto')}, "
                         "precision auto, threads 1)"]
        assert pyfunc.classifier.path in available_paths() and pyfunc.classifier.path == (expected or pyfunc.classifier.path)


def test_predict_returns_labels_and_probabilities(served) -> None:
    pyfunc, *_, texts = served
    out = pyfunc.predict(None, pd.DataFrame({"text": texts}))
    logits = pyfunc.logits(texts)
    assert out["label"].tolist() == [str(i) for i in logits.argmax(1)], "no contract in the graph: class indices as names"
    assert out["probability"].between(0.5, 1.0).all()
    np.testing.assert_allclose(out[["p_0", "p_1"]].sum(axis=1), 1.0, rtol=1e-6)
    assert pyfunc.predict(None, []).empty
    with pytest.raises(ValueError, match="input needs a 'text' column"):
        pyfunc.predict(None, pd.DataFrame({"review": ["x"]}))


def test_a_word_cnn_student_is_served_through_its_own_windows(tmp_path) -> None:
    """The graph carries its contract: a word-CNN student that reads 40-token windows is served, and run by the
    library runtime, through them, whatever the model_config beside it says (here the encoder's 16 / 6), and
    the registered model_config repeats the graph's windows (an n-gram bag in the graph)."""
    import torch

    from minibert.contract import Contract, Windows, read_onnx_contract, stamp_onnx
    from minibert.runtime import RuntimeConfig, TextClassifier
    from minibert.textcnn import TextCNNConfig, build_textcnn
    from pipeline.packaging import serving_config

    tok, tok_path = toy_tokenizer(tmp_path)
    torch.manual_seed(0)
    student = build_textcnn(TextCNNConfig(vocab_size=tok.get_vocab_size(), dim=8, widths=(1, 2), filters=4, bag_buckets=256)).eval()
    with torch.no_grad():
        student.bag.weight.weight.normal_()
    contract = Contract("textcnn", None, Windows(40, 30, "mean"), ("negative", "positive"))
    graph = export_onnx(student, tmp_path / "s.onnx")
    stamp_onnx(graph, contract)
    assert read_onnx_contract(graph) == contract
    config = serving_config(read_onnx_contract(graph), threads=1)
    assert (config["max_length"], config["stride"], config["threads"]) == (40, 30, 1)
    pyfunc = TextClassifierModel()
    pyfunc.load_context(SimpleNamespace(artifacts={"tokenizer": str(tok_path), "onnx": str(graph)},
                                        model_config={"max_length": 16, "stride": 6, "threads": 1}))
    texts = toy_texts(np.random.default_rng(1), (3, 30, 90))
    expected = text_logits(student, tok, contract.windows, batch_size=8)(texts)
    np.testing.assert_allclose(pyfunc.logits(texts), expected, atol=1e-4)
    runtime = TextClassifier.from_files(tok_path, graph, RuntimeConfig(threads=1))
    assert (runtime.cfg.max_length, runtime.cfg.stride, runtime.cfg.aggregate) == (40, 30, "mean")
    np.testing.assert_allclose(runtime.logits(texts), expected, atol=1e-4)
    at_encoder_windows = text_logits(student, tok, Windows(16, 6, "mean"), batch_size=8)(texts)
    assert not np.allclose(at_encoder_windows, expected, atol=1e-3), "the windows matter for the long texts"


def test_a_six_class_model_answers_its_class_names_and_every_probability(tmp_path) -> None:
    """K classes through the served chain: the names the graph's contract records, one p_<name> column each."""
    from minibert import build_classifier
    from minibert.config import ModelConfig
    from minibert.contract import Contract, Windows, stamp_onnx

    tok, tok_path = toy_tokenizer(tmp_path)
    classes = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    model = build_classifier(ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64),
                             ClassifierConfig(num_labels=len(classes))).eval()
    graph = export_onnx(model, tmp_path / "six.onnx")
    stamp_onnx(graph, Contract("classifier", None, Windows(16, 6, "mean"), classes))
    pyfunc = TextClassifierModel()
    pyfunc.load_context(SimpleNamespace(artifacts={"tokenizer": str(tok_path), "onnx": str(graph)}, model_config={"threads": 1}))
    texts = toy_texts(np.random.default_rng(2), (4, 12, 30))
    out = pyfunc.predict(None, pd.DataFrame({"text": texts}))
    assert list(out.columns) == ["label", "probability", *(f"p_{c}" for c in classes)]
    probabilities = out[[f"p_{c}" for c in classes]].to_numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    assert out["label"].tolist() == [classes[i] for i in pyfunc.logits(texts).argmax(1)]
    np.testing.assert_allclose(out["probability"], probabilities.max(axis=1))


def test_the_served_and_runtime_probabilities_follow_the_graphs_temperature_and_abstain_below_the_threshold(tmp_path) -> None:
    """A graph whose contract records temperature T answers softmax(logits / T) (the same argmax), in the pyfunc and
    in minibert.runtime alike; params.min_confidence turns a less confident answer into 'abstain'."""
    from minibert import build_classifier
    from minibert.config import ModelConfig
    from minibert.contract import Contract, Windows, read_onnx_contract, stamp_onnx
    from minibert.runtime import RuntimeConfig, TextClassifier, softmax
    from pipeline.serving_model import ABSTAIN

    tok, tok_path = toy_tokenizer(tmp_path)
    classes = ("billing", "login", "bug")
    model = build_classifier(ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), max_positions=64),
                             ClassifierConfig(num_labels=3)).eval()
    graph = export_onnx(model, tmp_path / "three.onnx")
    stamp_onnx(graph, Contract("classifier", None, Windows(16, 6, "mean"), classes, temperature=0.25))
    assert read_onnx_contract(graph).temperature == 0.25
    pyfunc = TextClassifierModel()
    pyfunc.load_context(SimpleNamespace(artifacts={"tokenizer": str(tok_path), "onnx": str(graph)}, model_config={"threads": 1}))
    texts = toy_texts(np.random.default_rng(3), (4, 9, 12, 20, 30, 41))
    logits = pyfunc.logits(texts)
    out = pyfunc.predict(None, pd.DataFrame({"text": texts}))
    expected = softmax(logits / 0.25)
    np.testing.assert_allclose(out[[f"p_{c}" for c in classes]].to_numpy(), expected, rtol=1e-5)
    assert not np.allclose(expected, softmax(logits), atol=1e-3), "the temperature changes the probabilities"
    runtime = TextClassifier.from_files(tok_path, graph, RuntimeConfig(batch_size=8, threads=1))
    np.testing.assert_allclose(runtime.predict(texts).probabilities, expected, rtol=1e-4, atol=1e-6)
    assert out["label"].tolist() == [classes[i] for i in logits.argmax(1)], "the argmax is the model's"

    threshold = float(np.median(out["probability"]))
    cautious = pyfunc.predict(None, pd.DataFrame({"text": texts}), params={"min_confidence": threshold})
    below = out["probability"] < threshold
    assert below.any() and (~below).any()
    assert (cautious["label"][below] == ABSTAIN).all() and (cautious["label"][~below] == out["label"][~below]).all()
    np.testing.assert_allclose(cautious["probability"], out["probability"])
    with pytest.raises(ValueError, match="min_confidence: 1.5 must be in"):
        pyfunc.predict(None, pd.DataFrame({"text": texts}), params={"min_confidence": 1.5})
