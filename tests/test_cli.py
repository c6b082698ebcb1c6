import shutil
from pathlib import Path

import pytest
import yaml

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


def test_a_profile_becomes_the_active_overlay_only_when_valid_and_params_yaml_is_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minibert.validation import ConfigError
    from pipeline.cli import use_profile
    from pipeline.params import load_params

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    shutil.copy(root / "profiles" / "imdb.yaml", tmp_path / "profiles" / "imdb.yaml")
    (tmp_path / "profiles" / "broken.yaml").write_text("task:\n  nmae: imdb\n")
    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    defaults = (tmp_path / "params.yaml").read_text()
    use_profile("imdb")
    assert load_params("params.yaml").data.dataset == "imdb" and load_params("params.yaml").cnn.max_length == 512
    overlay = (tmp_path / "profile.yaml").read_text()
    with pytest.raises(ConfigError, match=r"broken\.yaml: task\.nmae is not a key of params\.yaml"):
        use_profile("broken")
    with pytest.raises(FileNotFoundError, match=r"known profiles: \['default', 'broken', 'imdb'\]"):
        use_profile("nope")
    assert (tmp_path / "profile.yaml").read_text() == overlay, "a refused profile leaves the active one"
    use_profile("default")
    assert load_params("params.yaml").data.dataset == "sst2" and not any(yaml.safe_load((tmp_path / "profile.yaml").read_text()).values())
    assert (tmp_path / "params.yaml").read_text() == defaults, "params.yaml is never written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml", "profile.yaml", "profiles"], "no temp files left"


def test_schedule_refuses_a_bad_cron_a_bad_zone_and_a_missing_server(capsys: pytest.CaptureFixture[str]) -> None:
    """Each mistake ends with one line naming it and the fix (exit 2), before anything is served."""
    import socket

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipeline.flows import cron_schedule, server_url
    from pipeline.io import StageError

    assert cron_schedule("0 4 * * 1", "Europe/Paris").cron == "0 4 * * 1"
    with temporary_settings({PREFECT_API_URL: None}):
        assert main(["schedule", "--cron", "61 3 * * 0"]) == 2
        assert "--cron '61 3 * * 0' is not a cron expression" in capsys.readouterr().err
        assert main(["schedule", "--timezone", "Mars/Olympus"]) == 2
        assert "'Mars/Olympus' is not a known IANA time zone" in capsys.readouterr().err
        assert main(["schedule"]) == 2
        assert "schedules need a Prefect server: run `prefect server start" in capsys.readouterr().err
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):
        with pytest.raises(StageError, match=f"no healthy Prefect server at PREFECT_API_URL=http://127.0.0.1:{port}/api"):
            server_url(wait_s=0)


def test_attention_command_draws_every_head_or_one(stage_project: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from test_plots import png_size

    model = ["--model", str(stage_project / "models/pretrain.safetensors"),
             "--tokenizer", str(stage_project / "models/tokenizer.json")]
    assert main(["attention", "a gripping , beautifully acted film .", *model, "--out", str(tmp_path / "grid.png")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "grid.png")
    assert png_size(tmp_path / "grid.png")[0] > 400 and (tmp_path / "grid.png").stat().st_size > 20_000
    assert main(["attention", "dull and flat .", *model, "--layer", "0", "--head", "1", "--out", str(tmp_path / "h.png")]) == 0
    assert min(png_size(tmp_path / "h.png")) >= 600
    assert main(["attention", "dull .", *model, "--layer", "7", "--head", "0", "--out", str(tmp_path / "bad.png")]) == 2
    assert "this model has layers 0..0" in capsys.readouterr().err
    assert main(["attention", "dull .", *model, "--layer", "0", "--out", str(tmp_path / "bad.png")]) == 2
    assert main(["attention", "  ", *model]) == 2
    assert not (tmp_path / "bad.png").exists()
    from minibert.textcnn import TextCNNConfig, build_textcnn, save_textcnn
    from minibert.tokenizer import load_tokenizer, vocabulary_digest

    tok = load_tokenizer(stage_project / "models/tokenizer.json")
    cfg = TextCNNConfig(vocab_size=tok.get_vocab_size(), dim=8, widths=(1,), filters=2)
    cnn = save_textcnn(build_textcnn(cfg), cfg, tmp_path / "cnn.safetensors", vocabulary_digest(tok))
    assert main(["attention", "dull .", "--model", str(cnn), *model[2:], "--out", str(tmp_path / "bad.png")]) == 2
    assert "is a word-CNN: it has no attention to draw" in capsys.readouterr().err
    assert not (tmp_path / "bad.png").exists()
