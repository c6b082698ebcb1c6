"""WordPiece training, saving and loading; the saved file encodes identically in transformers."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from minibert.tokenizer import (
    SPECIAL_TOKENS,
    TokenizerConfig,
    load_tokenizer,
    save_tokenizer,
    to_transformers_tokenizer,
    train_wordpiece,
)
from minibert.validation import ConfigError

# Hand-written review-like sentences: enough for a small vocabulary, no dataset content.
CORPUS = [
    "The film is a charming, funny and moving portrait of a family.",
    "A dull, lifeless movie that never finds its footing.",
    "Performances are wonderful, but the script is painfully thin.",
    "I loved every minute of this beautifully photographed drama!",
    "An utterly forgettable sequel; the actors look bored.",
    "Smart, warm and surprisingly tender, it's the best comedy of the year.",
    "The plot makes no sense and the dialogue is laughable.",
    "Director's vision shines through despite a clumsy second act.",
    "Café scenes in Paris feel authentic and unhurried.",
    "Not worth the ticket price, not even for the special effects.",
] * 20
TEXTS = ["Hello WORLD, the movie was un-watchable!!", "Résumé of a naïve café owner", "zzzq unseenword"]


@pytest.fixture(scope="module")
def trained() -> Tokenizer:
    return train_wordpiece(iter(CORPUS), TokenizerConfig(vocab_size=200, min_frequency=2))


def test_special_tokens_come_first(trained: Tokenizer) -> None:
    assert [trained.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


def test_vocabulary_size_is_respected(trained: Tokenizer) -> None:
    assert len(SPECIAL_TOKENS) < trained.get_vocab_size() <= 200
    bigger = train_wordpiece(iter(CORPUS), TokenizerConfig(vocab_size=300, min_frequency=1))
    assert bigger.get_vocab_size() > trained.get_vocab_size()


def test_lowercases_strips_accents_and_wraps_in_cls_sep(trained: Tokenizer) -> None:
    upper, lower = trained.encode("The FILM"), trained.encode("the film")
    assert upper.ids == lower.ids
    assert trained.encode("café").ids == trained.encode("cafe").ids
    assert upper.tokens[0] == "[CLS]" and upper.tokens[-1] == "[SEP]"
    assert any(t.startswith("##") for t in trained.encode("unhurriedly").tokens)


def test_pair_encoding_sets_segment_ids(trained: Tokenizer) -> None:
    enc = trained.encode("a good film", "a bad film")
    first_sep = enc.tokens.index("[SEP]")
    assert set(enc.type_ids[: first_sep + 1]) == {0}
    assert set(enc.type_ids[first_sep + 1 :]) == {1}


def test_save_and_load_round_trip(trained: Tokenizer, tmp_path: Path) -> None:
    path = save_tokenizer(trained, tmp_path / "tok" / "tokenizer.json")
    assert json.loads(path.read_text())["model"]["type"] == "WordPiece"
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"], "no temp file left behind"
    loaded = load_tokenizer(path)
    for text in TEXTS:
        assert loaded.encode(text).ids == trained.encode(text).ids


def test_transformers_fast_tokenizer_encodes_identically(trained: Tokenizer, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = save_tokenizer(trained, tmp_path / "tokenizer.json")
    hf = to_transformers_tokenizer(path)
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (0, 1, 2, 3, 4)
    for text in TEXTS:
        ours = trained.encode(text)
        theirs = hf(text)
        assert theirs["input_ids"] == ours.ids
        assert theirs["token_type_ids"] == ours.type_ids
    pair_ours = trained.encode(TEXTS[0], TEXTS[1])
    assert hf(TEXTS[0], TEXTS[1])["input_ids"] == pair_ours.ids
    batch = hf(TEXTS, padding=True)
    trained.enable_padding(pad_id=0, pad_token="[PAD]")
    try:
        ours_batch = trained.encode_batch(TEXTS)
    finally:
        trained.no_padding()
    assert batch["input_ids"] == [e.ids for e in ours_batch]
    assert batch["attention_mask"] == [e.attention_mask for e in ours_batch]


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no tokenizer at .*missing.json"):
        load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not a valid tokenizer.json"):
        load_tokenizer(bad)


def test_non_string_text_is_refused() -> None:
    with pytest.raises(TypeError, match="text #1 is int"):
        train_wordpiece(iter(["fine", 3]), TokenizerConfig(vocab_size=50))  # type: ignore[list-item]


def test_config_rejects_a_vocabulary_smaller_than_the_specials() -> None:
    with pytest.raises(ConfigError, match="vocab_size: 4 must exceed"):
        TokenizerConfig(vocab_size=4)


def test_head_tail_truncation_keeps_the_first_quarter_and_the_end(trained: Tokenizer) -> None:
    from minibert.tokenizer import encode, head_tail

    assert head_tail(list(range(20)), 8) == [0, 1, 14, 15, 16, 17, 18, 19]
    assert head_tail([1, 2, 3], 8) == [1, 2, 3]
    text = " ".join(CORPUS[:3])
    full = trained.encode(text, add_special_tokens=False).ids
    cls_id, sep_id = trained.token_to_id("[CLS]"), trained.token_to_id("[SEP]")
    head = encode(trained, [text], 18)[0]
    both = encode(trained, [text], 18, truncation="head_tail")[0]
    assert head == [cls_id, *full[:16], sep_id]
    assert both == [cls_id, *full[:4], *full[-12:], sep_id]
    assert encode(trained, ["short one"], 18, "head_tail") == encode(trained, ["short one"], 18)
    with pytest.raises(ValueError, match="truncation must be one of"):
        encode(trained, [text], 18, truncation="tail")


def test_training_twice_in_separate_processes_gives_the_same_file(tmp_path: Path) -> None:
    """The trainer numbers equal-frequency tokens in hash order, random per process (91 of 8,000
    ids differed between two runs on SST-2 + IMDb); train_wordpiece renumbers them. (On a corpus
    full of ties, such as the toy word salads, even the token set at the cut-off can differ.)"""
    import subprocess
    import sys

    sst2 = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "sst2" / "train.tsv"
    if not sst2.is_file():
        pytest.skip(f"{sst2} not present")
    code = ("import sys; from minibert.tokenizer import TokenizerConfig, save_tokenizer, train_wordpiece; "
            "lines = open(sys.argv[1], encoding='utf-8').read().splitlines()[1:20001]; "
            "tok = train_wordpiece((l.split('\\t')[0] for l in lines), TokenizerConfig(vocab_size=2000)); "
            "save_tokenizer(tok, sys.argv[2])")
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(sst2), str(tmp_path / f"{name}.json")], check=True, timeout=120)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_windows_truncation_trains_on_every_token_with_the_text_label(trained: Tokenizer) -> None:
    import pandas as pd

    from pipeline.params import TaskParams
    from pipeline.task import encode_train, encode_train_indexed

    long_text, short_text = " ".join(CORPUS[:3]), "short one"
    df = pd.DataFrame({"text": [long_text, short_text, ""], "label": [1, 0, 1]})
    task = TaskParams(max_length=18, stride=12, truncation="windows")
    sequences, labels = encode_train(trained, df, task)
    full = trained.encode(long_text, add_special_tokens=False).ids
    cls_id, sep_id = trained.token_to_id("[CLS]"), trained.token_to_id("[SEP]")
    pieces = -(-len(full) // 16)  # 16 tokens a window between [CLS] and [SEP]
    assert len(full) > 32 and len(sequences) == pieces + 2
    assert [t for s in sequences[:pieces] for t in s[1:-1]] == full  # every token once, in order
    assert all(s[0] == cls_id and s[-1] == sep_id and len(s) <= 18 for s in sequences)
    assert sequences[pieces] == encode_train(trained, df.iloc[[1]], TaskParams(max_length=18, stride=12))[0][0]
    assert sequences[-1] == [cls_id, sep_id]  # an empty text still gives one row, so no label is lost
    assert labels.tolist() == [1] * pieces + [0, 1]
    *same, text_index = encode_train_indexed(trained, df, task)  # each row's text, for per-text soft targets
    assert same[0] == sequences and same[1].tolist() == labels.tolist() and text_index.tolist() == [0] * pieces + [1, 2]
    assert encode_train_indexed(trained, df, TaskParams(max_length=18, stride=12))[2].tolist() == [0, 1, 2]


def test_text_windows_read_every_token_of_a_text_whatever_the_tokenizer_was_left_set_to(trained: Tokenizer) -> None:
    """One cut for every prediction the pipeline makes (validation, export parity, calibration, the gate's probe):
    a long text's windows hold max_length - 2 tokens, start every stride tokens and end at its end, each text's
    count says where its windows stop, and a tokenizer left truncating or padding by an earlier use cuts the same."""
    from minibert.contract import Windows
    from pipeline.params import TaskParams
    from pipeline.task import text_windows

    long_text = " ".join(CORPUS[:3])
    full = trained.encode(long_text, add_special_tokens=False).ids
    cls_id, sep_id = trained.token_to_id("[CLS]"), trained.token_to_id("[SEP]")
    cut, counts = text_windows(trained, [long_text, "short one", ""], Windows(18, 12, "mean"))
    starts = [*range(0, len(full) - 16, 12), len(full) - 16]
    assert len(full) > 32 and counts.tolist() == [len(starts), 1, 1] and len(cut) == counts.sum()
    assert cut[: len(starts)] == [[cls_id, *full[s : s + 16], sep_id] for s in starts]
    assert cut[-1] == [cls_id, sep_id]  # an empty text still gives one window, so it still gets an answer
    trained.enable_truncation(8)
    trained.enable_padding(length=32)
    try:
        assert text_windows(trained, [long_text, "short one", ""], TaskParams(max_length=18, stride=12))[0] == cut
    finally:
        trained.no_truncation()
        trained.no_padding()
