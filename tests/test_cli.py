import shutil
from pathlib import Path

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


def test_profile_becomes_params_yaml_only_when_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minibert.validation import ConfigError
    from pipeline.cli import use_profile
    from pipeline.params import load_params

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    shutil.copy(root / "profiles" / "imdb.yaml", tmp_path / "profiles" / "imdb.yaml")
    (tmp_path / "profiles" / "broken.yaml").write_text("task:\n  nmae: imdb\n")
    (tmp_path / "params.yaml").write_text("task:\n  name: sst2\n")
    use_profile("imdb")
    assert load_params("params.yaml").task.name == "imdb"
    before = (tmp_path / "params.yaml").read_text()
    with pytest.raises(ConfigError, match=r"broken\.yaml.*task\.nmae"):
        use_profile("broken")
    with pytest.raises(FileNotFoundError, match=r"known profiles: \['broken', 'imdb'\]"):
        use_profile("nope")
    assert (tmp_path / "params.yaml").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml", "profiles"], "no temp files left"
