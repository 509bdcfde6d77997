"""``mrgrpo compare``: train one run per estimator × seed and compare them with 95% intervals.

Design (paired): seed ``s`` fixes the model initialization, the warm start (when the config's
``experiment.warm_start`` is set and the model is the ``tiny`` preset) and the trainer's sampling
RNG; the data (``task.seed``) is the same for every run. Every estimator of seed ``s`` starts
from the *same* weights, so estimator differences can be taken per seed (paired differences).

Layout of ``--out DIR``::

    warm_start/seed<S>/            the shared warm-start model of seed S (if any)
    runs/<estimator>/seed<S>/      an ordinary run directory (+ rollouts.jsonl, result.json)
    summary.json, compare.md, curves.png, pareto.png

A run counts as finished when its ``result.json`` exists; ``compare`` skips finished runs and
restarts unfinished ones, so an interrupted comparison resumes by rerunning the same command.

The config file is a ``mrgrpo train`` config plus an optional ``experiment`` section
(:class:`ExperimentConfig`), dropped before the train config is validated; any train config works.
Objectives are the reward components, divided by their declared range (``(r − lo)/(hi − lo)``,
so scales are comparable), and ``total`` = Σ_k w_k · normalized r_k. Three views of each:
``eval`` (mean over sampled generations on the task's held-out prompts after training),
``curve`` (mean of the training batch means over all steps: area under the learning curve) and
``end`` (mean over the last ``curve_tail`` fraction of steps).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import Field

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.experiments.stats import fmt_ci, holm_family, mean_ci, paired
from mrgrpo.keyvalue import parse_call, split_top_level
from mrgrpo.train.config import StrictConfig

RESULT_FILE = "result.json"
VIEWS = {
    "eval": "sampled generations on held-out prompts after training",
    "curve": "training-batch mean over all steps (area under the learning curve)",
    "end": "training-batch mean over the last steps",
}


class WarmStartConfig(StrictConfig):
    """Supervised warm start of the ``tiny`` preset (see :func:`mrgrpo.experiments.testbed.warm_start`)."""

    steps: int = Field(250, ge=0)
    learning_rate: float = Field(3e-3, gt=0)
    batch_size: int = Field(32, gt=0)
    format_rate: float = Field(0.6, ge=0, le=1)
    answer_noise: float = Field(0.0, ge=0, le=1, description="probability a target's answer is a wrong neighbour")
    include_eval: bool = Field(False, description="also fit the held-out prompts (held out of RL only)")


class EvalConfig(StrictConfig):
    """Sampled evaluation after training on the task's held-out split."""

    samples: int = Field(4, gt=0, description="samples per held-out prompt")
    max_new_tokens: int | None = Field(None, gt=0, description="default: trainer.max_completion_length or 64")
    temperature: float = Field(1.0, gt=0)
    limit: int | None = Field(None, gt=0, description="use only the first N held-out prompts")


class ExperimentConfig(StrictConfig):
    """The ``experiment`` section of a compare config. ``warm_start`` applies only when the
    config's ``model`` is the ``tiny`` preset (other models start from their own weights)."""

    warm_start: WarmStartConfig | None = None
    eval: EvalConfig = Field(default_factory=EvalConfig)
    curve_tail: float = Field(0.2, gt=0, le=1, description="fraction of steps averaged for the `end` view")


def load_compare_config(path: str | Path | None, overrides: list[str] | None = None) -> tuple[dict[str, Any], ExperimentConfig]:
    """``(train config mapping, experiment config)`` of a compare YAML (validated)."""
    from mrgrpo.experiments import testbed  # noqa: F401  (registers the testbed suite)
    from mrgrpo.train.config import apply_overrides, read_config_mapping, validate_config

    data, source = read_config_mapping(path)
    data = apply_overrides(data, overrides or [])
    experiment = ExperimentConfig.model_validate(data.pop("experiment", None) or {})
    validate_config(data, source)  # fail early, before any run starts
    return data, experiment


def parse_estimators(text: str) -> list[str]:
    """Split ``"grpo,corr_grpo(numerator=standardized;min_corr_sum=0.5)"`` at top-level commas."""
    return split_top_level(text)


def estimator_spec(label: str) -> tuple[str, dict[str, Any]]:
    """``"corr_grpo(shrinkage=auto;pooling=batch)"`` -> ``("corr_grpo", {"shrinkage": "auto", "pooling": "batch"})``.
    Read by :func:`mrgrpo.keyvalue.parse_call`: option values are YAML, separated by ``;``."""
    from mrgrpo.estimators import get_estimator

    name, options = parse_call(label)
    unknown = sorted(set(options) - set(get_estimator(name).options))  # an unknown name: UnknownNameError
    if unknown:
        raise ConfigError(f"{label!r}: {name} has no option(s) {unknown}")
    return name, options


def label_config(train: dict[str, Any], label: str, seed: int) -> dict[str, Any]:
    """The train config mapping of one run: ``train`` with the estimator and options of ``label``
    (the config's own options only when it names the same estimator) and ``seed``."""
    data = dict(train)
    name, options = estimator_spec(label)
    if name != data.get("estimator"):
        data["estimator_options"] = {}  # the config's options belong to its own estimator
    data.update(estimator=name, seed=seed)
    data["estimator_options"] = {**data.get("estimator_options", {}), **options}
    return data


def run_dir_of(out: Path, estimator: str, seed: int) -> Path:
    safe = "".join(c if c.isalnum() or c in "_.=-" else "-" for c in estimator).strip("-")
    return out / "runs" / safe / f"seed{seed}"


def _objectives(names: list[str]) -> list[str]:
    return [*names, "total"]


def _normalize(values: dict[str, float | None], names: list[str], ranges: list[tuple[float, float]], weights: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    total = 0.0
    for name, (lo, hi), w in zip(names, ranges, weights):
        v = values.get(name)
        out[name] = None if v is None or not math.isfinite(v) else (v - lo) / (hi - lo if hi > lo else 1.0)
        total = math.nan if out[name] is None else total + w * out[name]
    out["total"] = total if math.isfinite(total) else None
    return out


def _evaluate(run_dir: Path, config: Any, suite: Any, experiment: ExperimentConfig, model: str | None = None) -> dict[str, Any]:
    """Sampled generations of the run's final model (or of ``model``, a path or preset) on the
    held-out prompts, scored by the suite.

    Single-turn tasks only (the task registry says which); a multi-turn task's runs are compared
    on their training curves (``curve``/``end``)."""
    from mrgrpo.tasks.prepare import model_context
    from mrgrpo.tasks.registry import resolve
    from mrgrpo.train.evaluate import render_prompt, generate
    from mrgrpo.train.job import last_checkpoint
    from mrgrpo.train.presets import load_model

    task, spec = resolve(config.task)
    checkpoint = model or last_checkpoint(run_dir)
    if checkpoint is None or config.task.eval_size == 0 or task.rollout != "single_turn":
        return {}
    loaded = load_model(str(checkpoint))
    dataset = task.rows(spec, "eval", chat=loaded.chat)
    if experiment.eval.limit is not None:
        dataset = dataset.select(range(min(experiment.eval.limit, len(dataset))))
    samples = experiment.eval.samples
    max_new = experiment.eval.max_new_tokens or int(config.trainer.get("max_completion_length", 64))
    context = model_context(loaded.model, loaded.tokenizer)
    if context is not None:  # the task's prompt rule, as in training
        dataset, _ = task.fit(dataset, loaded.tokenizer, loaded.chat, context - max_new, task.resolve_options(spec.options))
    prompts = [render_prompt(p, loaded.tokenizer, loaded.chat) for p in dataset["prompt"]]
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        # generate() is greedy for one sample: always sample (at least 2) and keep `samples`
        completions = generate(loaded.model, loaded.tokenizer, prompts, max(samples, 2), max_new,
                               batch_size=16, temperature=experiment.eval.temperature)
    completions = [c[:samples] for c in completions]
    flat = [c for per in completions for c in per]
    columns = {name: [v for v in dataset[name] for _ in range(samples)] for name in dataset.column_names if name != "prompt"}
    flat_prompts = [p for p in dataset["prompt"] for _ in range(samples)]
    means = {}
    for component in suite.components:
        values = [v for v in component(flat_prompts, flat, **columns) if v is not None]
        means[component.name] = sum(values) / len(values) if values else None
    return {"means": means, "prompts": len(prompts), "samples": samples, "example": flat[:4]}


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one (estimator, seed) run; writes and returns its ``result.json``."""
    from mrgrpo.experiments import testbed
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import build_suite, run_train
    from mrgrpo.train.presets import load_tokenizer

    started = time.monotonic()
    run_dir = Path(spec["run_dir"])
    if (run_dir / RESULT_FILE).is_file():
        return json.loads((run_dir / RESULT_FILE).read_text())
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted run: start it again from scratch
    experiment = ExperimentConfig.model_validate(spec["experiment"])
    data = label_config(spec["train"], spec["estimator"], spec["seed"])
    if spec.get("warm_dir"):
        warm = testbed.warm_start(validate_config(data), spec["seed"], spec["warm_dir"], **experiment.warm_start.model_dump())
        data["model"] = str(warm)
    config = validate_config(data)
    result = run_train(config, out=run_dir, quiet=spec.get("quiet", True))  # logs rollouts.jsonl itself
    suite = build_suite(config, load_tokenizer(config.model))
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curves = {name: [m.get(f"mrgrpo/rewards/{name}") for m in metrics] for name in suite.names}
    tail = max(1, int(round(experiment.curve_tail * len(metrics))))

    def avg(values: list[Any]) -> float | None:
        kept = [v for v in values if v is not None and math.isfinite(v)]
        return sum(kept) / len(kept) if kept else None

    record = {
        "estimator": spec["estimator"],
        "seed": spec["seed"],
        "names": suite.names,
        "ranges": [list(r) for r in suite.reward_ranges],
        "weights": list(suite.weights),
        "steps": result.steps,
        "stop_reason": result.stop_reason,
        "train_seconds": round(result.seconds, 1),
        "curves": curves,
        "raw": {"curve": {n: avg(c) for n, c in curves.items()}, "end": {n: avg(c[-tail:]) for n, c in curves.items()}},
    }
    evaluation = _evaluate(run_dir, config, suite, experiment)
    if evaluation:
        record["raw"]["eval"] = evaluation["means"]
        record["eval_info"] = {k: v for k, v in evaluation.items() if k != "means"}
    record["objectives"] = {
        view: _normalize(values, suite.names, suite.reward_ranges, suite.weights) for view, values in record["raw"].items()
    }
    record["seconds"] = round(time.monotonic() - started, 1)
    (run_dir / RESULT_FILE).write_text(json.dumps(record, indent=1))
    return record


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def plan(train: dict[str, Any], experiment: ExperimentConfig, estimators: list[str], seeds: list[int], out: Path) -> list[dict[str, Any]]:
    use_warm = experiment.warm_start is not None and train.get("model", "tiny") == "tiny"
    specs = []
    for seed in seeds:  # seed-major: each seed's runs complete together (early paired results)
        for estimator in estimators:
            specs.append({
                "estimator": estimator,
                "seed": seed,
                "run_dir": str(run_dir_of(out, estimator, seed)),
                "warm_dir": str(out / "warm_start" / f"seed{seed}") if use_warm else None,
                "train": train,
                "experiment": experiment.model_dump(mode="json"),
            })
    return specs


def run_compare(
    config_path: str | Path | None,
    estimators: list[str],
    seeds: list[int],
    out: str | Path,
    jobs: int = 1,
    overrides: list[str] | None = None,
    log: Any = print,
    before_runs: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the comparison and write its report; returns the summary.

    ``before_runs`` is called once the warm starts exist (when the experiment has them) and before
    any RL run starts: ``mrgrpo compare --start`` evaluates the policy before RL there."""
    for label in estimators:
        estimator_spec(label)
    if len(set(estimators)) != len(estimators) or not estimators:
        raise ConfigError("--estimators: give distinct names")
    out = Path(out)
    train, experiment = load_compare_config(config_path, overrides)
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import check_run

    for label in estimators:  # each estimator bound to the suite before any run starts
        check_run(validate_config(label_config(train, label, seeds[0] if seeds else 0), f"--estimators {label}"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_config.yaml").write_text(yaml.safe_dump({**train, "experiment": experiment.model_dump(mode="json")}, sort_keys=False))
    specs = plan(train, experiment, estimators, seeds, out)
    todo = [s for s in specs if not (Path(s["run_dir"]) / RESULT_FILE).is_file()]
    log(f"compare: {len(specs)} runs ({len(estimators)} estimators × {len(seeds)} seeds), {len(specs) - len(todo)} already finished → {out}")
    started = time.monotonic()
    warm = {s["warm_dir"]: s for s in (todo if before_runs is None else specs) if s["warm_dir"]}
    in_pool = bool(todo) and jobs > 1
    if not in_pool:  # warm starts first (one per seed), so runs of one seed never race for it
        for spec in warm.values():
            _warm_only(spec)
        if before_runs is not None:
            before_runs()
    if todo:
        if jobs <= 1:
            for i, spec in enumerate(todo, 1):
                record = run_one(spec)
                log(f"  [{i}/{len(todo)}] {spec['estimator']} seed {spec['seed']}: {record['seconds']:.0f} s")
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init, initargs=(1,)) as pool:
                if warm:
                    list(pool.map(_warm_only, warm.values()))
                if before_runs is not None:
                    before_runs()
                futures = {pool.submit(run_one, spec): spec for spec in todo}
                from concurrent.futures import as_completed

                for i, future in enumerate(as_completed(futures), 1):
                    spec, record = futures[future], future.result()
                    log(f"  [{i}/{len(todo)}] {spec['estimator']} seed {spec['seed']}: {record['seconds']:.0f} s")
    elapsed = time.monotonic() - started
    records = [json.loads((Path(s["run_dir"]) / RESULT_FILE).read_text()) for s in specs]
    summary = summarize(records, estimators, seeds)
    summary.update(config=str(config_path) if config_path else "embedded default", out=str(out), jobs=jobs,
                   wall_seconds_this_call=round(elapsed, 1), experiment=experiment.model_dump(mode="json"),
                   overrides=list(overrides or []), platform=platform_info(threads=1 if jobs > 1 else None))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    from mrgrpo.experiments.plots import plot_curves, plot_pareto

    figures = {
        "curves.png": plot_curves(out / "curves.png", records, estimators),
        "pareto.png": plot_pareto(out / "pareto.png", summary, records, estimators),
    }
    (out / "compare.md").write_text(render_markdown(summary, figures))
    log(f"wrote {out / 'compare.md'}")
    return summary


def load_records(out: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """``(records, estimators)`` of a finished ``mrgrpo compare --out OUT``: every run's
    ``result.json`` (the committed data a figure is redrawn from) in the comparison's estimator
    order (``summary.json``)."""
    out = Path(out)
    summary_path = out / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{summary_path}: not found; point at the --out directory of a finished `mrgrpo compare`")
    summary = json.loads(summary_path.read_text())
    records = []
    for estimator in summary["estimators"]:
        for seed in summary["seeds"]:
            path = run_dir_of(out, estimator, seed) / RESULT_FILE
            if not path.is_file():
                raise FileNotFoundError(f"{path}: not found; rerun `mrgrpo compare` on {out} to finish the comparison")
            records.append(json.loads(path.read_text()))
    return records, list(summary["estimators"])


def draw_figure(out: str | Path, path: str | Path, components: list[str] | None = None) -> Path:
    """Redraw the training curves of ``mrgrpo compare --out OUT`` from its committed results:
    ``components`` (default all) per estimator, mean over seeds with a 95% band; written to ``path``."""
    from mrgrpo.experiments.plots import plot_curves

    records, estimators = load_records(out)
    seeds = sorted({r["seed"] for r in records})
    title = f"{Path(out).name}: training reward (÷ range), mean ± 95% CI over {len(seeds)} seeds"
    drawn = plot_curves(Path(path), records, estimators, components=components, title=title)
    if drawn is None:
        raise InputError(f"{out}: no runs to draw")
    return drawn


#: Environment settings that change CPU float results (recorded with a comparison).
NUMERIC_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR")


def platform_info(threads: int | None = None) -> dict[str, Any]:
    """What a comparison's numbers depend on besides its config and code: library versions, the
    CPU instruction set torch's kernels use (``AVX512``, ``AVX2``, ``DEFAULT``...), the thread
    count and the :data:`NUMERIC_ENV` settings. Warm start and RL are chaotic in float rounding:
    two hosts whose kernels round differently (e.g. AVX2 vs AVX512) give different runs from
    the same seed, while one host reproduces its runs bit for bit. ``threads``: the runs'
    thread count where it is not this process's (``--jobs`` > 1 runs workers on one thread)."""
    import os
    import platform

    import torch
    import transformers

    model, flags = cpu_identity()
    return {
        "machine": platform.machine(), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": model, "cpu_flags": flags,
        "threads": threads or torch.get_num_threads(), "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ},
    }


#: CPU features that change which bfloat16/float32 kernels oneDNN and torch pick beyond torch's
#: capability string: both an AMD EPYC (AVX512, avx512_bf16) and an Intel Xeon with AMX report
#: ``AVX512``, yet their bfloat16 matrix products round differently (measured on the real-model
#: headline: the same seed's runs agree for 3 steps and part at the 4th).
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_identity() -> tuple[str | None, list[str]]:
    """``(model name, the KERNEL_FLAGS present)`` from ``/proc/cpuinfo`` (``(None, [])`` where it
    cannot be read)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return None, []
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), None)
    flags_line = next((line.split(":", 1)[1] for line in text.splitlines() if line.startswith("flags")), "")
    present = set(flags_line.split())
    return model, [f for f in KERNEL_FLAGS if f in present]


def _warm_only(spec: dict[str, Any]) -> str:
    from mrgrpo.experiments import testbed
    from mrgrpo.train.config import validate_config

    experiment = ExperimentConfig.model_validate(spec["experiment"])
    data = {**spec["train"], "estimator": "grpo", "estimator_options": {}, "seed": spec["seed"]}
    return str(testbed.warm_start(validate_config(data), spec["seed"], spec["warm_dir"], **experiment.warm_start.model_dump()))


def summarize(records: list[dict[str, Any]], estimators: list[str], seeds: list[int]) -> dict[str, Any]:
    """Per view, objective and estimator: mean ± 95% CI over seeds; paired differences vs the baseline."""
    names = records[0]["names"]
    objectives = _objectives(names)
    by = {(r["estimator"], r["seed"]): r for r in records}
    views = [v for v in VIEWS if all(v in r["objectives"] for r in records)]
    baseline = "grpo" if "grpo" in estimators else estimators[0]
    table: dict[str, Any] = {}
    diffs: dict[str, Any] = {}
    for view in views:
        table[view], diffs[view] = {}, {}
        for est in estimators:
            table[view][est] = {}
            for obj in objectives:
                mean, half, n = mean_ci([by[(est, s)]["objectives"][view].get(obj) for s in seeds])
                table[view][est][obj] = {"mean": mean, "ci": half, "n": n}
            if est != baseline:
                diffs[view][est] = {
                    obj: paired([by[(est, s)]["objectives"][view].get(obj) for s in seeds],
                                [by[(baseline, s)]["objectives"][view].get(obj) for s in seeds])
                    for obj in objectives
                }
        holm_family(diffs[view])  # one family per view: every estimator × objective of the table
    seconds = [r["seconds"] for r in records]
    return {
        "estimators": estimators, "seeds": seeds, "names": names, "objectives": objectives, "baseline": baseline,
        "ranges": records[0]["ranges"], "weights": records[0]["weights"], "views": views,
        "table": table, "paired": diffs,
        "steps": records[0]["steps"], "run_seconds": {"total": round(sum(seconds), 1), "mean": round(sum(seconds) / len(seconds), 1)},
        "eval_info": records[0].get("eval_info", {}),
    }


def render_tables(summary: dict[str, Any]) -> list[str]:
    """Markdown tables: per view, mean ± 95% CI (best mean per column in bold), then paired differences."""
    lines: list[str] = []
    objectives, baseline = summary["objectives"], summary["baseline"]
    n = len(summary["seeds"])
    for view in summary["views"]:
        lines += [f"**{view}** — {VIEWS[view]}; mean ± 95% CI over {n} seeds (best per column in bold)", ""]
        lines += ["| estimator | " + " | ".join(objectives) + " |", "|---" * (len(objectives) + 1) + "|"]
        rows = summary["table"][view]
        best = {o: max((rows[e][o]["mean"] for e in rows if math.isfinite(rows[e][o]["mean"])), default=math.nan) for o in objectives}
        for est, cells in rows.items():
            out = []
            for o in objectives:
                text = fmt_ci(cells[o]["mean"], cells[o]["ci"])
                out.append(f"**{text}**" if math.isfinite(best[o]) and cells[o]["mean"] == best[o] else text)
            lines.append(f"| {est} | " + " | ".join(out) + " |")
        lines.append("")
        if summary["paired"].get(view):
            lines += [f"Paired difference vs {baseline} ({view}): mean ± 95% CI, and seeds with difference > 0 / < 0", ""]
            lines += ["| estimator | " + " | ".join(objectives) + " |", "|---" * (len(objectives) + 1) + "|"]
            for est, cells in summary["paired"][view].items():
                out = []
                for o in objectives:
                    d = cells[o]
                    sig = " ✓" if math.isfinite(d["ci"]) and abs(d["mean"]) > d["ci"] else ""
                    sig += "‡" if d.get("p_holm", math.nan) < 0.05 else ""
                    out.append(f"{d['mean']:+.3f} ± {d['ci']:.3f} ({d['positive']}/{d['negative']}){sig}" if math.isfinite(d["mean"]) else "—")
                lines.append(f"| {est} | " + " | ".join(out) + " |")
            family = sum(math.isfinite(c[o].get("p_holm", math.nan)) for c in summary["paired"][view].values() for o in objectives)
            lines += ["", "✓: the 95% interval of the paired difference excludes 0 (per comparison, uncorrected). "
                      f"‡: the paired t-test still rejects 0 at 5% after Holm's correction over the table's {family} comparisons.", ""]
    return lines


def render_markdown(summary: dict[str, Any], figures: dict[str, Any]) -> str:
    est = ",".join(summary["estimators"])
    lines = [
        f"# mrgrpo compare: {est}",
        "",
        f"- config: `{summary['config']}`" + (f" with `--set {' '.join(summary['overrides'])}`" if summary["overrides"] else ""),
        f"- seeds: {summary['seeds']} (paired: every estimator of a seed starts from the same weights, data and RNG seed)",
        f"- steps per run: {summary['steps']}; run time: {summary['run_seconds']['mean']:.0f} s mean, "
        f"{summary['run_seconds']['total']:.0f} s summed over runs; this call: {summary['wall_seconds_this_call']:.0f} s wall (jobs={summary['jobs']})",
        f"- components (range, weight): " + ", ".join(
            f"{n} ([{lo:g}, {hi:g}], {w:g})" for n, (lo, hi), w in zip(summary["names"], summary["ranges"], summary["weights"])),
        "- objectives are divided by their range; total = Σ w_k · normalized r_k",
    ]
    info = summary.get("eval_info") or {}
    if info:
        lines.append(f"- eval: {info.get('prompts')} held-out prompts × {info.get('samples')} sampled generations")
    lines += ["", *render_tables(summary), "## Figures", ""]
    for name, path in figures.items():
        if path is not None:
            lines.append(f"![{name}]({name})")
    return "\n".join(lines) + "\n"


def evaluate_start(config_path: str | Path, out: str | Path, seeds: list[int], overrides: list[str] | None = None) -> dict[str, Any]:
    """Held-out sampled evaluation of the policy *before* RL of a finished ``mrgrpo compare --out
    OUT``, with the comparison's own evaluation settings and seeds: each seed's warm start, or,
    for a config without ``experiment.warm_start`` (a pretrained model), the config's model itself.

    Writes and returns ``OUT/start.json``: ``{"seeds": [...], "objectives": {seed: {...}}}``, the
    objectives normalized as in ``compare`` (component / range; ``total`` = weighted sum), so
    ``eval − start`` per seed is what RL added.
    """
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import build_suite
    from mrgrpo.train.presets import load_tokenizer

    out = Path(out)
    train, experiment = load_compare_config(config_path, overrides)
    result: dict[str, Any] = {"seeds": list(seeds), "objectives": {}, "raw": {}}
    for seed in seeds:
        model = str(train.get("model", "tiny"))
        if experiment.warm_start is not None and model == "tiny":
            warm = out / "warm_start" / f"seed{seed}"
            if not (warm / "config.json").is_file():
                raise FileNotFoundError(f"{warm}: no warm start there; run `mrgrpo compare` on {out} first")
            model = str(warm)
        config = validate_config({**train, "model": model, "seed": seed})
        suite = build_suite(config, load_tokenizer(model))
        means = _evaluate(out, config, suite, experiment, model=model)["means"]
        result["raw"][str(seed)] = means
        result["objectives"][str(seed)] = _normalize(means, suite.names, suite.reward_ranges, suite.weights)
    out.mkdir(parents=True, exist_ok=True)
    (out / "start.json").write_text(json.dumps(result, indent=1))
    return result


def compare_diagnostics(out: str | Path, estimators: list[str], seeds: list[int], window: int = 5) -> dict[str, Any]:
    """:func:`~mrgrpo.experiments.testbed.run_diagnostics` of every run of ``mrgrpo compare --out OUT``, averaged over ``seeds``
    per estimator (same keys; nested dicts averaged per component)."""
    from mrgrpo.experiments.testbed import run_diagnostics

    out = Path(out)
    result: dict[str, Any] = {}
    for estimator in estimators:
        runs = [run_diagnostics(run_dir_of(out, estimator, seed), window) for seed in seeds]

        def avg(values: list[Any]) -> Any:
            if isinstance(values[0], dict):
                return {k: avg([v[k] for v in values]) for k in values[0]}
            kept = [v for v in values if v is not None]
            return sum(kept) / len(kept) if kept else None

        result[estimator] = {key: avg([r[key] for r in runs]) for key in runs[0]}
    return result
