import pytest

from minibert.config import PRESETS
from pipeline.cli import count_parameters, main


def test_parameter_counts_follow_the_bert_formula() -> None:
    cfg = PRESETS["tiny"]
    c, i, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_layer = (3 * c * c + 3 * c) + (c * c + c) + (c * i + i) + (i * c + c) + 4 * c
    head = c * c + c + 2 * c + cfg.vocab_size
    embeddings = (cfg.vocab_size + cfg.max_positions + cfg.type_vocab_size) * c + 2 * c
    total, non_embedding = count_parameters("tiny")
    assert total == embeddings + n * per_layer + head
    assert non_embedding == n * per_layer + head


def test_presets_command_prints_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == list(PRESETS)
