import pytest

from mrgrpo.experiments import compare, testbed
from mrgrpo.experiments.testbed import parse_answer


def test_parse_answer_prefers_the_tag():
    assert parse_answer("3 + 4 = 7. <answer>7</answer>") == 7
    assert parse_answer("3 - 9 = -6.") == -6
    assert parse_answer("no number") is None


def test_components_and_scale():
    suite = testbed.testbed_suite(scales={"low": 100})
    assert suite.names == ["correct", "format", "close", "low"]
    assert suite.reward_ranges[3] == (0.0, 100.0)
    completions = ["<answer>7</answer>", "4", "nothing"]
    answers = ["7", "7", "7"]
    values = {c.name: c(None, completions, answer=answers) for c in suite.components}
    assert values["correct"] == [1.0, 0.0, 0.0]
    assert values["format"] == [1.0, 0.0, 0.0]
    # close = 1 - |pred - ref| / 9: 1 for 7, 1 - 3/9 for 4, 0 without a number
    assert values["close"] == pytest.approx([1.0, 6 / 9, 0.0])
    # low = 100 * (18 - pred) / 27: answering lower than the reference earns more (the conflict)
    assert values["low"] == pytest.approx([100 * 11 / 27, 100 * 14 / 27, 0.0])


def test_extra_components_a_cost_and_a_length():
    suite = testbed.testbed_suite(scales={"low": 100}, extra=["unformatted", "length"])
    assert suite.names == ["correct", "format", "close", "low", "unformatted", "length"]
    assert suite.reward_ranges[4:] == [(0.0, 1.0), (0.0, 200.0)]
    completions = ["<answer>7</answer>", "4", "x" * 300]
    values = {c.name: c(None, completions, answer=["7"] * 3) for c in suite.components}
    assert values["unformatted"] == [1.0 - v for v in values["format"]] == [0.0, 1.0, 1.0]
    assert values["length"] == [18.0, 1.0, 200.0]  # characters, clipped to the declared range
    with pytest.raises(ValueError, match="optional components"):
        testbed.testbed_suite(extra=["speed"])
    with pytest.raises(ValueError, match="distinct"):
        testbed.testbed_suite(extra=["length", "length"])


def test_unknown_scale_is_an_error():
    with pytest.raises(ValueError, match="unknown component"):
        testbed.testbed_suite(scales={"speed": 2})


def test_warm_start_targets_work_the_sum_or_guess():
    assert testbed.sft_completion("3 + 4", "7", tagged=True) == "3 + 4 = 7. <answer>7</answer>"
    assert testbed.sft_completion("3 + 4", "7", tagged=False) == "3 + 4 = 7."
    # a guess skips the worked sum and answers a wrong neighbour
    assert testbed.sft_completion("3 + 4", "7", tagged=True, guess="9") == "9. <answer>9</answer>"
    assert testbed.sft_completion("3 + 4", "7", tagged=False, guess="5") == "5."
    assert 0 not in testbed.GUESS_OFFSETS


def _learnable_config():
    from mrgrpo.experiments.compare import load_compare_config
    from mrgrpo.train.config import validate_config

    train, experiment = load_compare_config("configs/testbed/learnable_scale1.yaml")
    return validate_config(train), experiment


def test_learnable_config_declares_the_guessing_warm_start():
    config, experiment = _learnable_config()
    assert experiment.warm_start.answer_noise == 0.5 and experiment.warm_start.include_eval
    assert experiment.warm_start.steps == 2000  # 1000 left the worked sums right ~37% of the time
    assert config.rewards.suite == "testbed"


def test_learnable_configs_differ_only_in_the_scale_of_low():
    from mrgrpo.experiments.compare import load_compare_config

    (x1, e1), (x100, e100) = (load_compare_config(f"configs/testbed/learnable_scale{s}.yaml") for s in (1, 100))
    assert x1["rewards"]["options"]["scales"] == {"low": 1} and x100["rewards"]["options"]["scales"] == {"low": 100}
    x100["rewards"]["options"]["scales"] = {"low": 1}
    assert x1 == x100 and e1 == e100


def test_warm_start_reloads_with_the_ids_it_was_fitted_with(tmp_path):
    from mrgrpo.train.presets import load_tokenizer
    from mrgrpo.train.tiny import build_tokenizer

    config, _ = _learnable_config()
    out = testbed.warm_start(config, 0, tmp_path / "warm", steps=1, batch_size=2, answer_noise=1.0, include_eval=True)
    text = "<|im_start|>assistant\n7 + 3 = 10. <answer>10</answer><|im_end|>"
    fitted = testbed.reloadable_tokenizer(tmp_path / "scratch")
    assert load_tokenizer(str(out))(text)["input_ids"] == fitted(text)["input_ids"]
    # a saved tiny checkpoint reloads with its own (in-code) tokenizer, not Qwen2's digit splitter
    assert build_tokenizer()(text)["input_ids"] == fitted(text)["input_ids"]
    assert not (tmp_path / "warm.tmp").exists()


def test_warm_start_rejects_a_bad_noise(tmp_path):
    config, _ = _learnable_config()
    with pytest.raises(ValueError, match="answer_noise"):
        testbed.warm_start(config, 0, tmp_path / "warm", steps=1, answer_noise=1.5)


def test_scaled_suite_rescales_values_and_range():
    suite = testbed.scaled_suite(base="testbed", scales={"close": 10})
    assert suite.names == ["correct", "format", "close", "low"]
    assert suite.reward_ranges[2] == (0.0, 10.0) and suite.reward_ranges[0] == (0.0, 1.0)
    values = {c.name: c(None, ["<answer>4</answer>"], answer=["7"]) for c in suite.components}
    assert values["close"] == pytest.approx([10 * (1 - 3 / 9)])
    assert values["correct"] == [0.0]
    with pytest.raises(ValueError, match="unknown component"):
        testbed.scaled_suite(base="testbed", scales={"speed": 2})
    with pytest.raises(ValueError, match="unknown reward suite"):
        testbed.scaled_suite(base="nope", scales={})


def test_run_diagnostics_summarizes_the_logged_steps(tmp_path):
    import json

    def step(i, sat, distinct):
        return {"step": i, "names": ["correct", "format"],
                "components": {"correct": {"saturation": sat}, "format": {"saturation": 1 - sat}},
                "variance_share": {"correct": 0.25, "format": 0.75},
                "advantage_collapse": {"distinct_reward_profiles": 4.0, "distinct_advantages": {"grpo": distinct}}}

    run = tmp_path / "runs" / "grpo" / "seed0"
    run.mkdir(parents=True)
    (run / "diagnostics.jsonl").write_text("\n".join(json.dumps(step(i, i / 10, 2.0 + i % 2)) for i in range(10)))
    d = testbed.run_diagnostics(run, window=2)
    assert d["steps"] == 10 and d["distinct_profiles"] == 4.0 and d["distinct_advantages"] == 2.5
    assert d["saturation_first"]["correct"] == pytest.approx(0.05)  # steps 0, 1
    assert d["saturation_last"]["format"] == pytest.approx(1 - 0.85)  # steps 8, 9
    assert compare.compare_diagnostics(tmp_path, ["grpo"], [0], window=2)["grpo"]["variance_share"]["format"] == 0.75
    # one step with a near-constant total (shares of ±1e6) does not decide the summary: the median over steps
    lines = [step(i, 0.5, 2.0) for i in range(5)]
    lines[2]["variance_share"] = {"correct": -3e5, "format": 3e5 + 1}
    (run / "diagnostics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert testbed.run_diagnostics(run)["variance_share"] == {"correct": 0.25, "format": 0.75}


@pytest.mark.parametrize("name, scaled", [("smollm2_length10", "length"), ("smollm2_format10", "format"), ("smollm2_brevity10", "length")])
def test_smollm2_configs_raise_one_component_of_the_demo_suite(name, scaled):
    from mrgrpo.experiments.compare import load_compare_config

    train, _ = load_compare_config(f"configs/testbed/{name}.yaml")
    options = dict(train["rewards"]["options"])
    assert train["model"] == "smollm2" and options.pop("base") == "math" and options["scales"] == {scaled: 10}
    suite = testbed.scaled_suite(base="math", **options)
    assert suite.names == ["correctness", "format", "length"]
    assert dict(zip(suite.names, suite.reward_ranges)) == {n: (0.0, 10.0 if n == scaled else 1.0) for n in suite.names}


def test_a_scaled_run_config_still_builds_its_suite_after_the_task_is_prepared():
    # the train job records the suite's name as rewards.suite; compare builds the suite again after training
    from mrgrpo.experiments.compare import load_compare_config
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import build_suite, prepare_task

    train, _ = load_compare_config("configs/testbed/learnable_scale1.yaml")
    train["rewards"] = {"suite": "scaled", "options": {"base": "testbed", "scales": {"low": 10}}}
    config = validate_config(train)
    prepare_task(config)
    assert config.rewards.suite == "scaled"
    assert build_suite(config, None).reward_ranges[3] == (0.0, 10.0)


def test_evaluate_start_scores_the_policy_before_rl(tmp_path):
    import json

    config = tmp_path / "c.yaml"
    config.write_text(
        "model: tiny\ntask: {name: chain_sum, options: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}, size: 8, eval_size: 4}\n"
        "rewards: {suite: testbed}\nestimator: grpo\nmax_steps: 1\nexperiment: {eval: {samples: 2, max_new_tokens: 8}}\n")
    # no warm start in the config: the config's model itself, on every seed
    result = compare.evaluate_start(config, tmp_path / "out", [0, 1])
    assert set(result["objectives"]) == {"0", "1"} and json.loads((tmp_path / "out" / "start.json").read_text()) == result
    for objectives in result["objectives"].values():
        assert set(objectives) == {"correct", "format", "close", "low", "total"}
        assert all(0.0 <= objectives[n] <= 1.0 for n in ("correct", "format", "close", "low"))
    # a warm-start config whose comparison has not run yet says so
    config.write_text(config.read_text().replace("experiment: {", "experiment: {warm_start: {steps: 1}, "))
    with pytest.raises(FileNotFoundError, match="no warm start"):
        compare.evaluate_start(config, tmp_path / "none", [0])
