"""mrgrpo.keyvalue: the one reader of key=value settings (-o, --set, name(k=v;...))."""

import pytest

from mrgrpo.errors import ConfigError
from mrgrpo.keyvalue import parse_assignment, parse_call, parse_options, parse_value, split_top_level


def test_values_are_yaml_1_2():
    assert parse_value("1e-5") == 1e-5 and parse_value("010") == 10 and parse_value("yes") == "yes"
    assert parse_value("[24, 64]") == [24, 64] and parse_value("null") is None and parse_value("  ") == ""
    assert parse_value("{a: 1}") == {"a": 1} and parse_value("auto") == "auto"
    with pytest.raises(ConfigError, match=r"-o value '\[1' is not valid YAML \(.* at line 1, column 3\)"):
        parse_value("[1", what="-o")


def test_assignments_name_the_flag_and_the_fix():
    assert parse_assignment("trainer.learning_rate=1e-5", dotted=True) == ("trainer.learning_rate", 1e-5)
    assert parse_assignment(" k = a=b ") == ("k", "a=b")  # the first = splits; the value keeps the rest
    with pytest.raises(ConfigError, match=r"--set 'max_steps': expected key=value \(e.g. --set x=1\)"):
        parse_assignment("max_steps", example="x=1")
    with pytest.raises(ConfigError, match="empty key part"):
        parse_assignment("a..b=1", dotted=True)
    with pytest.raises(ConfigError, match="empty key$"):
        parse_assignment("=1")


def test_options_are_flat_and_given_once():
    assert parse_options(["eps=1e-5", "scale=batch"]) == {"eps": 1e-5, "scale": "batch"}
    with pytest.raises(ConfigError, match="--option eps is given twice"):
        parse_options(["eps=1", "eps=2"])


def test_labelled_calls_and_top_level_lists():
    text = "grpo, corr_grpo(shrinkage=auto;eps=1e-5),sa_mrpo(gamma=1)"
    assert split_top_level(text) == ["grpo", "corr_grpo(shrinkage=auto;eps=1e-5)", "sa_mrpo(gamma=1)"]
    assert parse_call("corr_grpo(shrinkage=auto;eps=1e-5)") == ("corr_grpo", {"shrinkage": "auto", "eps": 1e-5})
    assert parse_call("grpo") == ("grpo", {}) and parse_call("grpo()") == ("grpo", {})
    with pytest.raises(ConfigError, match="options go in parentheses"):
        parse_call("grpo(eps=1")
    with pytest.raises(ConfigError, match="given twice"):
        parse_call("grpo(eps=1;eps=2)")
