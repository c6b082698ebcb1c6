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
PROFILES = [ROOT / "profiles" / "tiny.yaml", ROOT / "profiles" / "imdb.yaml", ROOT / "profiles" / "gpu.yaml"]
FREE_FORM = ("model.", "distill.student.")  # a preset plus overrides: its keys are the file's, not the dataclass's


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def base() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_params_yaml_spells_out_every_default() -> None:
    """The one set of defaults: every dataclass field is written in params.yaml, so DVC tracks every value a
    stage reads (a default living only in a dataclass would change results without changing a tracked param)."""
    expected = {k: v for k, v in flatten(Params()).items() if not k.startswith(FREE_FORM)}
    written = {k: v for k, v in flatten(base()).items() if not k.startswith(FREE_FORM)}
    assert set(expected) == set(written)
    # and the dataclasses default to params.yaml's values: code that builds Params() runs the defaults too
    differ = {k: (expected[k], written[k]) for k in expected if expected[k] != written[k]
              and not (isinstance(written[k], list) and list(expected[k]) == written[k])}
    assert not differ, f"dataclass defaults differ from params.yaml: {differ}"
    assert flatten(Params().model) == flatten(base()["model"])
    assert flatten(Params().distill.student) == flatten(base()["distill"]["student"])
    overlay = yaml.safe_load((ROOT / "profile.yaml").read_text())
    assert list(overlay) == list(base()) and not any(overlay.values()), "the committed overlay runs the defaults"


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_profiles_are_short_overlays_of_what_differs(path: Path) -> None:
    params = load_params(ROOT / "params.yaml", profile=path)
    overlay, defaults = flatten(yaml.safe_load(path.read_text())), flatten(base())
    same = sorted(k for k, v in overlay.items() if defaults.get(k, object()) == v)
    assert not same, f"profiles/{path.name} repeats defaults: {same}"
    assert len(overlay) <= 40, f"profiles/{path.name}: {len(overlay)} keys; an overlay lists only what differs"
    assert params.model_config(vocab_size=1000).vocab_size == 1000
    for key, value in overlay.items():
        assert flatten(params).get(key, value) == value or key.startswith(FREE_FORM), key


def test_an_overlay_sets_only_keys_params_yaml_has(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "profile.yaml").write_text("finetune: {epochs: 3.0}\nmodel: {num_layers: 2}\n")
    params = load_params(tmp_path / "params.yaml")  # the overlay beside it is the active one
    assert params.finetune.epochs == 3.0 and params.model_config(1000).num_layers == 2
    assert params.finetune.batch_size == base()["finetune"]["batch_size"], "what the overlay leaves is the default"
    (tmp_path / "profile.yaml").write_text("finetune: {epochz: 3.0}\n")
    with pytest.raises(ConfigError, match=r"profile\.yaml: finetune\.epochz is not a key of params\.yaml"):
        load_params(tmp_path / "params.yaml")
    (tmp_path / "profile.yaml").write_text("train: {processes: 2}\n")
    with pytest.raises(ConfigError, match=r"train\.processes is read by dvc\.yaml's command templating"):
        load_params(tmp_path / "params.yaml")
    assert load_params(tmp_path / "params.yaml", overrides={"finetune.epochs": 4.0}, profile=tmp_path / "none.yaml").finetune.epochs == 4.0


# What each profile promises to share with the default (its header comment): the same recipe upstream
# (a profile of another dataset prepares its own data, so its tokenizer and encoder are its own), or for
# the GPU profile the default run's prepared data and tokenizer, reused from DVC's cache.
SHARED_WITH_DEFAULT = {
    "imdb.yaml": ("prepare", "tokenizer", "model", "pretrain"),
    "trec.yaml": ("prepare", "tokenizer", "model"),
    "gpu.yaml": ("data", "prepare", "tokenizer"),
}


@pytest.mark.parametrize("name", sorted(SHARED_WITH_DEFAULT))
def test_profiles_share_the_default_upstream_sections(name: str) -> None:
    profile = yaml.safe_load((ROOT / "profiles" / name).read_text())
    for section in SHARED_WITH_DEFAULT[name]:
        assert section not in profile, f"profiles/{name}: section {section!r} differs from params.yaml"


def test_tiny_profile_is_tiny() -> None:
    params = load_params(ROOT / "params.yaml", profile=PROFILES[0])
    cfg = params.model_config(vocab_size=600)
    assert cfg.num_layers == 1 and params.prepare.max_train_rows <= 500


def test_unknown_nested_key_names_file_and_dotted_key(tmp_path: Path) -> None:
    data = base()
    data["finetune"]["transfer"]["max_lenght"] = 64
    path = write(tmp_path, data)
    with pytest.raises(ConfigError, match=r"params\.yaml: unknown key 'finetune\.transfer\.max_lenght'; did you mean "
                                          r"'finetune\.transfer\.max_length'"):
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
    assert "distill.student" in sections and "soft_targets.shares" in sections and "soft_targets.shares.tfidf" not in sections
    for name, stage in stages.items():
        entries = stage.get("params", [])
        own = [e for e in entries if isinstance(e, str)]
        # the active profile's changes to the same sections: tracked so a profile reruns what it changes, and no more
        assert {"profile.yaml": list(dict.fromkeys(e.split(".")[0] for e in own))} in entries, name
        for entry in own:
            assert entry in sections or entry in keys, f"stage {name} declares unknown param {entry}"


def test_dvc_yaml_stages_depend_on_their_own_source() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        assert f"pipeline/stages/{name}.py" in stage["deps"], name
        launched = f"python -m pipeline.launch --processes ${{train.processes}} pipeline.stages.{name} "
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
        if not isinstance(node, ast.ImportFrom) or not node.module or not node.module.startswith("pipeline"):
            continue
        names = [a.name for a in node.names] if node.module == "pipeline" else [node.module.removeprefix("pipeline.")]
        for name in (n.replace(".", "/") for n in names):
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


def test_the_data_names_a_dataset_and_the_transfer_length_is_checked(tmp_path: Path) -> None:
    raw = base()
    raw["data"]["dataset"] = "../etc"
    with pytest.raises(ConfigError, match=r"data\.dataset: '\.\./etc' is not a dataset name"):
        load_params(write(tmp_path, raw))
    raw["data"]["dataset"] = "imdb"
    assert load_params(write(tmp_path, raw)).data.dataset == "imdb"
    raw["finetune"]["transfer"]["max_length"] = 3
    with pytest.raises(ConfigError, match=r"finetune\.transfer\.max_length: 3 is out of range; expected >= 4"):
        load_params(write(tmp_path, raw))


def test_the_intermediate_task_reaches_every_model_that_learns_from_it() -> None:
    """One line of the dataset's description, three readers: the teacher's first phase, the word-CNN's extra rows,
    the TF-IDF folds' extra texts; each reads it from the prepared data's contract, so each depends on that folder."""
    from pipeline import datasets
    from pipeline.teacher import transfer_task
    from pipeline.word_cnn import extra_task

    params = load_params(ROOT / "params.yaml", profile=ROOT / "profile.yaml")
    assert datasets.load(params.data.dataset, ROOT / "datasets").intermediate == "imdb"
    assert datasets.load("imdb", ROOT / "datasets").intermediate is None
    transfer, extra = transfer_task(params.finetune, params.task), extra_task(params.task)
    assert transfer.stride == params.finetune.transfer.max_length * 3 // 4 and transfer.truncation == "head_tail"
    assert extra.truncation == "head_tail" and extra.max_length > params.task.max_length
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in ("finetune", "cnn", "baseline_oof"):
        assert "data/prepared" in stages[name]["deps"], name


def test_a_word_cnn_student_needs_the_word_cnn_trained(tmp_path: Path) -> None:
    raw = base()
    raw["soft_targets"]["shares"].update(teacher=0.667, word_cnn=0.0)
    with pytest.raises(ConfigError, match=r"distill\.student_kind: 'word_cnn' starts from the cnn stage's model, which is "
                                          r"trained only when soft_targets\.shares\.word_cnn is above 0"):
        load_params(write(tmp_path, raw))
    raw["distill"].update(student_kind="transformer", soup=1)
    assert load_params(write(tmp_path, raw)).soft_targets.shares.word_cnn == 0.0


@pytest.mark.parametrize("section, key, value, message", [
    ("export", "threads", -1, r"export\.threads: -1 must be >= 0"),
    ("distill", "hidden_weight", -1.0, r"distill\.hidden_weight: -1\.0 must be >= 0"),
    ("distill", "alpha", 1.5, r"distill\.alpha: 1\.5 is out of range; expected \[0, 1\]"),
    ("train", "log_every", 0, r"train\.log_every: 0 is out of range; expected >= 1"),
    ("train", "schedule", "cosine_restarts", r"train\.schedule"),
    ("finetune", "lr", 0.0, r"finetune\.lr: 0\.0 is out of range; expected > 0"),
    ("soft_targets.shares", "tfidf", 1.2, r"soft_targets\.shares\.tfidf: 1\.2 is out of range; expected in \[0, 1\]"),
    ("soft_targets.shares", "word_cnn", 0.8, r"soft_targets\.shares\.teacher: 0\.334 \+ tfidf 0\.333 \+ word_cnn 0\.8 must sum to 1"),
    ("soft_targets.shares", "word_cnn", 0.0, r"soft_targets\.shares\.teacher: .* must sum to 1"),
    ("distill", "attention_weight", 1.0, r"distill\.hidden_weight / attention_weight: a word_cnn student has no layers"),
    ("distill", "soup", 0, r"distill\.soup: 0 is out of range; expected >= 1"),
    ("distill", "student_kind", "transformer", r"distill\.soup: 3 averages word_cnn students, which all start from the cnn "),
    ("cnn", "widths", [], r"cnn\.widths: \[\] is out of range; expected one or more widths"),
    ("cnn", "dropout", 1.0, r"cnn\.dropout: 1\.0 is out of range; expected in \[0, 1\)"),
    ("transfer_set", "rows", -1, r"transfer_set\.rows: -1 is out of range; expected >= 0"),
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
                  "cnn_task": ("task", "cnn.max_length", "cnn.stride")}


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
    # what the helpers a stage hands `params` to read: stage_run and resume_fingerprint read the declared keys
    whole = {"stage_run": (), "resume_fingerprint": ()}
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert params_reads("stages/distill")[0] >= {"task", "distill", "distill.student", "cnn.bag_lr_scale"}
    for name, stage in stages.items():
        declared = [d for d in stage.get("params", []) if isinstance(d, str)]
        reads, handed, loose = params_reads(f"stages/{name}")
        assert not loose, f"stage {name!r} uses params where this check cannot follow it: {loose}; read params.<key> directly"
        unknown = handed - set(whole)
        assert not unknown, f"stage {name!r} hands the whole params to {sorted(unknown)}: read the keys it needs there"
        reads |= {section for callee in handed for section in whole[callee]}
        assert "" not in reads, f"stage {name!r} reads params as a whole"
        missing = {key for key in reads if not any(key == d or key.startswith(f"{d}.") for d in declared)}
        assert not missing, f"dvc.yaml stage {name!r} reads {sorted(missing)} without declaring them under params:"
        # budgets.mode: load_params applies it to the time budgets of the sections a training stage reads
        implied = {"budgets.mode"} if any(k in reads for k in ("pretrain", "finetune", "cnn", "distill")) else set()
        unread = {d for d in declared if not any(k == d or k.startswith(f"{d}.") or d.startswith(f"{k}.") for k in reads)}
        unread -= implied
        assert not unread, f"dvc.yaml stage {name!r} declares {sorted(unread)}, which it does not read"


def test_what_the_student_reads_comes_through_the_artifacts() -> None:
    """The seam: distill reads data, tokenizer, the soft targets and its starting weights (five deps besides
    code); the stages after it read how the student reads texts from its file, so none declares cnn.*."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    inputs = [d for d in stages["distill"]["deps"] if not d.startswith(("pipeline/", "minibert"))]
    assert len(inputs) <= 5 and "models/soft_targets" in inputs, inputs
    assert not [d for d in inputs if d.startswith(("models/teacher_logits", "models/baseline_oof", "data/transfer"))]
    for name in ("export", "quantize", "evaluate", "register"):
        declared = [d for d in stages[name]["params"] if isinstance(d, str)]
        assert not [d for d in declared if d.startswith(("cnn", "distill"))], (name, declared)


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


def test_the_word_cnn_reads_its_own_windows(tmp_path: Path) -> None:
    raw = base()
    params = load_params(write(tmp_path, raw))
    assert params.cnn_task() == params.task, "null: the task's windows"
    raw["cnn"]["max_length"], raw["cnn"]["stride"] = 512, 448
    raw["distill"]["student_kind"] = "word_cnn"
    params = load_params(write(tmp_path, raw))
    assert (params.cnn_task().max_length, params.cnn_task().stride) == (512, 448)
    assert params.cnn_task().aggregate == params.task.aggregate
    assert params.task.max_length == base()["task"]["max_length"], "the encoder's windows stay"
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


def test_the_steps_mode_turns_every_time_budget_and_the_deadline_off() -> None:
    """budgets.mode: steps is the reproducible mode: no loop stops on the clock, so the model depends on the
    params (and the host's kind), not on how fast the host is; the stages that train declare the switch."""
    timed = load_params(ROOT / "params.yaml", profile=ROOT / "profile.yaml")
    assert timed.budgets.mode == "time" and timed.pretrain.time_budget_min and timed.deadline.minutes
    steps = load_params(ROOT / "params.yaml", profile=ROOT / "profile.yaml", overrides={"budgets.mode": "steps"})
    budgets = (steps.pretrain.time_budget_min, steps.finetune.time_budget_min, steps.finetune.transfer.time_budget_min,
               steps.cnn.time_budget_min, steps.distill.time_budget_min, steps.deadline.minutes)
    assert budgets == (None,) * 6
    assert (steps.pretrain.max_steps, steps.finetune.epochs, steps.distill.soup) == (
        timed.pretrain.max_steps, timed.finetune.epochs, timed.distill.soup), "what the loops run is unchanged"
    from pipeline.deadline import plan_for
    assert plan_for(steps, 0.0, True) is None and plan_for(timed, 0.0, True) is not None
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in ("pretrain", "finetune", "cnn", "distill"):
        assert "budgets.mode" in stages[name]["params"], name


def test_a_params_file_missing_a_key_is_refused_not_filled_from_a_dataclass(tmp_path: Path) -> None:
    """One set of defaults: a key absent from params.yaml would be decided by a dataclass default that DVC
    cannot see, so reading the file refuses it, naming the key (a profile, an overlay, may leave keys out)."""
    raw = base()
    del raw["distill"]["temperature"]
    with pytest.raises(ConfigError, match=r"params\.yaml: missing distill\.temperature; params\.yaml holds every default"):
        load_params(write(tmp_path, raw))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(base()))
    (tmp_path / "profile.yaml").write_text("distill: {temperature: 3.0}\n")
    assert load_params(tmp_path / "params.yaml").distill.temperature == 3.0
