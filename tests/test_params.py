"""params.yaml is read by one module that returns typed dataclasses and rejects what it does not know."""

import ast
import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from minibert.validation import ConfigError
from pipeline.params import Params, flatten, load_params

ROOT = Path(__file__).resolve().parent.parent
PROFILES = [ROOT / "params.yaml", ROOT / "profiles" / "tiny.yaml", ROOT / "profiles" / "imdb.yaml", ROOT / "profiles" / "gpu.yaml"]


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def base() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_profiles_load_and_spell_out_every_key(path: Path) -> None:
    params = load_params(path)
    raw = yaml.safe_load(path.read_text())
    # Every dataclass field is written in the file, so DVC tracks every value a stage reads.
    expected = {k for k in flatten(Params()) if not k.startswith(("model.", "distill.student."))}
    written = {k for k in flatten(raw) if not k.startswith(("model.", "distill.student."))}
    assert expected == written
    assert params.model_config(vocab_size=1000).vocab_size == 1000


# What each profile promises to share with the default (its header comment), so DVC reuses the
# default run's prepared data, tokenizer and (IMDb) pretrained encoder from its cache.
SHARED_WITH_DEFAULT = {
    "imdb.yaml": ("data", "prepare", "tokenizer", "model", "pretrain"),
    "gpu.yaml": ("data", "prepare", "tokenizer"),
}


@pytest.mark.parametrize("name", sorted(SHARED_WITH_DEFAULT))
def test_profiles_share_the_default_upstream_sections(name: str) -> None:
    default = yaml.safe_load((ROOT / "params.yaml").read_text())
    profile = yaml.safe_load((ROOT / "profiles" / name).read_text())
    for section in SHARED_WITH_DEFAULT[name]:
        assert profile[section] == default[section], f"profiles/{name}: section {section!r} differs from params.yaml"


def test_tiny_profile_is_tiny() -> None:
    params = load_params(PROFILES[1])
    cfg = params.model_config(vocab_size=600)
    assert cfg.num_layers == 1 and params.prepare.max_train_rows <= 500


def test_unknown_nested_key_names_file_and_dotted_key(tmp_path: Path) -> None:
    data = base()
    data["finetune"]["optim"]["lrr"] = 0.1
    path = write(tmp_path, data)
    with pytest.raises(ConfigError, match=r"params\.yaml: unknown key 'finetune\.optim\.lrr'; did you mean 'finetune\.optim\.lr'"):
        load_params(path)


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    data = base()
    data["finetune"]["epochs"] = "two"
    with pytest.raises(ConfigError, match=r"finetune\.epochs: expected a number, got str 'two'"):
        load_params(write(tmp_path, data))


def test_bad_model_override_is_caught_at_load(tmp_path: Path) -> None:
    data = base()
    data["model"]["num_heads"] = 3
    with pytest.raises(ConfigError, match=r"hidden_size: 256 is not divisible by num_heads=3"):
        load_params(write(tmp_path, data))
    data["model"] = {"preset": "huge"}
    with pytest.raises(ConfigError, match=r"model\.preset: 'huge' is not one of"):
        load_params(write(tmp_path, data))


def test_vocab_size_belongs_to_the_tokenizer(tmp_path: Path) -> None:
    data = base()
    data["model"]["vocab_size"] = 100
    with pytest.raises(ConfigError, match=r"model\.vocab_size: set tokenizer\.vocab_size instead"):
        load_params(write(tmp_path, data))


def test_literal_choices_are_checked(tmp_path: Path) -> None:
    data = base()
    data["data"]["source"] = "s3"
    with pytest.raises(ConfigError, match=r"data\.source: 's3' is not one of \['mirror', 'hub'\]"):
        load_params(write(tmp_path, data))


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.yaml: params file not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "params.yaml"
    bad.write_text("finetune: [unclosed")
    with pytest.raises(ConfigError, match="params.yaml: not valid YAML"):
        load_params(bad)


def test_dvc_yaml_params_name_real_keys() -> None:
    """Every params entry a stage declares in dvc.yaml exists in params.yaml (a key, or a section at any depth)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    keys = set(flatten(base()))
    sections = {".".join(k.split(".")[:depth]) for k in keys for depth in range(1, k.count(".") + 1)}
    assert "distill.ensemble" in sections and "distill.ensemble.folds" not in sections
    for name, stage in stages.items():
        for entry in stage.get("params", []):
            assert entry in sections or entry in keys, f"stage {name} declares unknown param {entry}"


def test_dvc_yaml_stages_depend_on_their_own_source() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        assert f"pipeline/stages/{name}.py" in stage["deps"], name
        launched = f"python -m pipeline.launch --processes ${{{name}.processes}} pipeline.stages.{name} "
        assert stage["cmd"].startswith((f"python -m pipeline.stages.{name} ", launched)), name
        if name in ("pretrain", "finetune"):  # the stages that train data-parallel when params say so
            assert stage["cmd"].startswith(launched) and "pipeline/launch.py" in stage["deps"], name


# Plumbing a stage imports without listing it: changing how files are written, params read, runs
# tracked or progress shown must not rerun the pipeline. Any other pipeline module a stage imports
# decides what it computes, so it belongs in the stage's deps.
PLUMBING = {"io", "params", "runner", "tracking", "provenance", "progress", "curves", "stages/common"}


def pipeline_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """The pipeline modules (as ``stages/finetune``) ``module`` imports, directly or through other
    non-plumbing pipeline modules."""
    seen = set() if seen is None else seen
    tree = ast.parse((ROOT / "pipeline" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline."):
            name = node.module.removeprefix("pipeline.").replace(".", "/")
            if name not in seen:
                seen.add(name)
                if name not in PLUMBING:
                    pipeline_imports(name, seen)
    return seen


def test_dvc_yaml_stages_depend_on_the_pipeline_modules_they_import() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        modules = pipeline_imports(f"stages/{name}")
        imported = {f"pipeline/{m}.py" for m in modules}
        missing = {f"pipeline/{m}.py" for m in modules - PLUMBING} - set(stage["deps"])
        assert not missing, f"dvc.yaml stage {name!r} imports {sorted(missing)} without listing them in its deps"
        listed = {d for d in stage["deps"] if d.startswith("pipeline/") and d.endswith(".py")}
        unused = listed - imported - {f"pipeline/stages/{name}.py", "pipeline/launch.py", "pipeline/serving_model.py"}
        assert not unused, f"dvc.yaml stage {name!r} lists {sorted(unused)}, which it does not import"


def test_transfer_task_must_differ_from_the_profile_task(tmp_path: Path) -> None:
    raw = base()
    raw["task"]["name"] = "imdb"
    raw["distill"]["ensemble"]["extra_task"] = "none"
    raw["cnn"]["extra_task"] = "none"
    raw["finetune"]["transfer"]["task"] = "imdb"
    with pytest.raises(ConfigError, match=r"finetune\.transfer\.task: 'imdb' is the profile's own task"):
        load_params(write(tmp_path, raw))
    raw["finetune"]["transfer"]["task"] = "sst2"
    assert load_params(write(tmp_path, raw)).finetune.transfer.task == "sst2"
    raw["finetune"]["transfer"]["stride"] = 500
    with pytest.raises(ConfigError, match="transfer: need max_length >= 3 and 0 < stride"):
        load_params(write(tmp_path, raw))


def test_ensemble_extra_task_must_differ_from_the_profile_task(tmp_path: Path) -> None:
    raw = base()  # sst2 with extra_task imdb: fine
    assert load_params(write(tmp_path, raw)).distill.ensemble.extra_task == "imdb"
    raw["distill"]["ensemble"]["extra_task"] = "sst2"
    with pytest.raises(ConfigError, match=r"distill\.ensemble\.extra_task: 'sst2' is the profile's own task"):
        load_params(write(tmp_path, raw))
    raw = base()
    assert load_params(write(tmp_path, raw)).cnn.extra_task == "imdb"
    raw["cnn"]["extra_task"] = "sst2"
    with pytest.raises(ConfigError, match=r"cnn\.extra_task: 'sst2' is the profile's own task"):
        load_params(write(tmp_path, raw))


@pytest.mark.parametrize("section, key, value, message", [
    ("export", "opset", 13, r"export\.opset: 13 is out of range; expected 17\.\.20"),
    ("distill", "hidden_weight", -1.0, r"distill\.hidden_weight: -1\.0 must be >= 0"),
    ("distill", "alpha", 1.5, r"distill\.alpha: 1\.5 is out of range; expected \[0, 1\]"),
    ("evaluate", "latency_threads", 0, r"evaluate\.latency_threads: 0 must be >= 1"),
    ("distill.ensemble", "baseline_share", 1.2, r"distill\.ensemble\.baseline_share: 1\.2 is out of range; expected in \[0, 1\]"),
    ("distill.ensemble", "folds", 1, r"distill\.ensemble\.folds: 1 is out of range; expected >= 2"),
    ("distill.ensemble", "cnn_share", 0.8, r"distill\.ensemble\.cnn_share: 0\.8 \+ baseline_share 0\.333 exceed 1"),
    ("distill.ensemble", "cnn_share", 0.0, r"distill\.student_kind: 'word_cnn' starts from the cnn stage's model, which is "
                                           r"trained only when distill\.ensemble\.cnn_share is above 0"),
    ("distill", "attention_weight", 1.0, r"distill\.hidden_weight / attention_weight: a word_cnn student has no layers"),
    ("distill", "soup", 0, r"distill\.soup: 0 is out of range; expected >= 1"),
    ("distill", "student_kind", "transformer", r"distill\.soup: 3 averages word_cnn students, which all start from the cnn "),
    ("cnn", "widths", [], r"cnn\.widths: \[\] is out of range; expected one or more widths"),
    ("cnn", "extra_max_length", 2, r"cnn\.extra_max_length: 2 is out of range; expected >= 3"),
    ("cnn", "dropout", 1.0, r"cnn\.dropout: 1\.0 is out of range; expected in \[0, 1\)"),
    ("distill.transfer_set", "rows", -1, r"distill\.transfer_set\.rows: -1 is out of range; expected >= 0"),
    ("distill.transfer_set", "max_words", 3, r"distill\.transfer_set\.max_words: 3 is out of range; expected >= min_words \(4\)"),
    ("distill.transfer_set", "unit", "paragraph", r"distill\.transfer_set\.unit"),
    ("prepare", "val_fraction", 1.0, r"prepare\.val_fraction: 1\.0 is out of range; expected in \(0, 1\)"),
    ("prepare", "max_train_rows", 0, r"prepare\.max_train_rows: 0 is out of range; expected >= 1"),
])
def test_out_of_range_values_name_the_key(tmp_path: Path, section: str, key: str, value: object, message: str) -> None:
    raw = base()
    node = raw
    for part in section.split("."):
        node = node[part]
    node[key] = value
    with pytest.raises(ConfigError, match=rf"params\.yaml: {message}"):
        load_params(write(tmp_path, raw))


# Params methods a stage may call, and the part of params.yaml each reads.
PARAMS_METHODS = {"model_config": ("model",), "student_config": ("distill.student",),
                  "cnn_task": ("task", "cnn.max_length", "cnn.stride"),
                  "student_task": ("task", "distill.student_kind", "cnn.max_length", "cnn.stride")}


def params_reads(module: str) -> tuple[set[str], set[str], list[str]]:
    """(dotted params.yaml keys or sections that ``module`` reads as ``params.<a>.<b>...``, names of the
    functions from other modules it hands the whole ``params`` to, uses of ``params`` the check cannot
    follow: an alias, or a function of the module that takes it under another name)."""
    tree = ast.parse((ROOT / "pipeline" / f"{module}.py").read_text())
    local = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    reads, handed, loose = set(), set(), []
    chained = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    followed: set[int] = set()  # `params` names at the root of an attribute chain or passed to a call
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in chained:  # the outermost attribute of a chain
            names = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                names.insert(0, inner.attr)
                inner = inner.value
            if not (isinstance(inner, ast.Name) and inner.id == "params"):
                continue
            followed.add(id(inner))
            owner, path = Params, []
            for name in names:
                if name in PARAMS_METHODS and owner is Params:
                    *more, last = PARAMS_METHODS[name]
                    reads.update(more)
                    path = last.split(".")
                    break
                fields = typing.get_type_hints(owner)
                if name not in fields:
                    break  # a method of the value: the path so far is what is read
                path.append(name)
                owner = fields[name]
                if not dataclasses.is_dataclass(owner):
                    break
            reads.add(".".join(path))
        if isinstance(node, ast.Call):
            partial = ast.unparse(node.func) in ("partial", "functools.partial")
            func = node.args[0] if partial else node.func
            callee = ast.unparse(func)
            args = node.args[1:] if partial else node.args
            passed = [(i, None) for i, a in enumerate(args) if isinstance(a, ast.Name) and a.id == "params"]
            passed += [(None, k.arg) for k in node.keywords if isinstance(k.value, ast.Name) and k.value.id == "params"]
            followed |= {id(a) for a in [*args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)}
            for index, keyword in passed:
                if callee not in local:
                    handed.add(callee)
                    continue
                parameters = [a.arg for a in local[callee].args.args]
                name = keyword or (parameters[index] if index < len(parameters) else "*args")
                if name != "params":
                    loose.append(f"{callee}(..., {name}=params)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "params" and isinstance(node.ctx, ast.Load) and id(node) not in followed:
            loose.append(f"line {node.lineno}: {ast.unparse(node)}")
    return reads, handed, loose


def test_dvc_yaml_declares_every_param_a_stage_reads() -> None:
    """A stage reading a key dvc.yaml does not declare would not rerun when that key changes (and its
    MLflow run, which records the declared keys, would not show it)."""
    from pipeline.model_card import CARD_SECTIONS

    # what the helpers a stage hands `params` to read: stage_run and resume_fingerprint read the declared keys
    whole = {"stage_run": (), "resume_fingerprint": (), "card_blocks": (*CARD_SECTIONS, "register")}
    card_reads, _, _ = params_reads("model_card")
    assert {key.split(".")[0] for key in card_reads} <= set(whole["card_blocks"]), card_reads
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert params_reads("stages/distill")[0] >= {"task", "distill", "distill.student", "distill.ensemble.baseline_share"}
    for name, stage in stages.items():
        declared = stage.get("params", [])
        reads, handed, loose = params_reads(f"stages/{name}")
        assert not loose, f"stage {name!r} uses params where this check cannot follow it: {loose}; read params.<key> directly"
        unknown = handed - set(whole)
        assert not unknown, f"stage {name!r} hands the whole params to {sorted(unknown)}: read the keys it needs there"
        reads |= {section for callee in handed for section in whole[callee]}
        assert "" not in reads, f"stage {name!r} reads params as a whole"
        missing = {key for key in reads if not any(key == d or key.startswith(f"{d}.") for d in declared)}
        assert not missing, f"dvc.yaml stage {name!r} reads {sorted(missing)} without declaring them under params:"


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["distill"]["student"].update(max_positions=32),
     r"task\.max_length: 64 tokens do not fit distill\.student's max_positions \(32\)"),
    (lambda raw: raw["model"].update(max_positions=100),
     r"pretrain\.max_length: 128 tokens do not fit model's max_positions \(100\)"),
    (lambda raw: (raw["model"].update(max_positions=128), raw["finetune"]["transfer"].update(max_length=256)),
     r"finetune\.transfer\.max_length: 256 tokens do not fit model's max_positions \(128\)"),
])
def test_sequence_lengths_must_fit_the_position_tables(tmp_path: Path, edit, message: str) -> None:
    """Caught when params are read, not by a tensor-size error after the stages before it have run."""
    raw = base()
    edit(raw)
    with pytest.raises(ConfigError, match=message):
        load_params(write(tmp_path, raw))


def test_the_word_cnn_reads_its_own_windows_and_a_word_cnn_student_keeps_them(tmp_path: Path) -> None:
    raw = base()
    params = load_params(write(tmp_path, raw))
    assert params.cnn_task() == params.task == params.student_task(), "null: the task's windows"
    raw["cnn"]["max_length"], raw["cnn"]["stride"] = 512, 448
    raw["distill"]["student_kind"] = "word_cnn"
    params = load_params(write(tmp_path, raw))
    assert (params.cnn_task().max_length, params.cnn_task().stride) == (512, 448)
    assert params.student_task() == params.cnn_task() and params.cnn_task().name == params.task.name
    assert params.task.max_length == base()["task"]["max_length"], "the encoder's windows stay"
    raw["distill"].update(student_kind="transformer", hidden_weight=0, attention_weight=0, soup=1)
    assert load_params(write(tmp_path, raw)).student_task() == load_params(write(tmp_path, raw)).task
    raw["cnn"]["stride"] = None
    with pytest.raises(ConfigError, match="cnn.max_length and cnn.stride: set both"):
        load_params(write(tmp_path, raw))
    raw["cnn"]["stride"] = 511
    with pytest.raises(ConfigError, match=r"cnn.max_length 512 / cnn.stride 511"):
        load_params(write(tmp_path, raw))
    raw["cnn"]["stride"], raw["task"]["truncation"] = 448, "windows"
    with pytest.raises(ConfigError, match="cnn.max_length: with task.truncation 'windows'"):
        load_params(write(tmp_path, raw))
    raw["task"]["truncation"], raw["cnn"]["bag_buckets"] = "head", 2**24 + 1
    with pytest.raises(ConfigError, match=r"cnn\.bag_buckets: 16777217 is out of range"):
        load_params(write(tmp_path, raw))
