"""mrgrpo.integrations.verl.sessions: v1 rows -> sessions -> prompts (pure, no verl needed)."""

import numpy as np
import pytest

from mrgrpo.errors import InputError
from mrgrpo.integrations.verl.sessions import Trajectories, current, parse_key, scores_column, using


def test_keys_are_uid_session_index_and_the_uid_may_contain_underscores():
    assert parse_key("3f2a_0_1") == ("3f2a", "0", 1)
    assert parse_key("my_prompt_7_12_0") == ("my_prompt_7", "12", 0)
    for bad in ["nokey", "a_b", "_0_1", "u_0_x"]:
        with pytest.raises(InputError, match="TransferQueue key"):
            parse_key(bad)


def test_final_output_of_each_session_and_the_broadcast_map():
    # prompt a: session 0 has outputs 0,1,2 (shuffled), session 1 one output; prompt b: one session
    keys = ("a_0_1", "b_0_0", "a_1_0", "a_0_2", "a_0_0")
    final, row_session = Trajectories(keys=keys).sessions(["a", "b", "a", "a", "a"])
    assert [keys[i] for i in final] == ["a_0_2", "b_0_0", "a_1_0"]  # order of first appearance
    assert row_session.tolist() == [0, 1, 2, 0, 0]  # every output of a_0 maps to a_0's final row


def test_misaligned_rows_and_duplicate_keys_raise():
    t = Trajectories(keys=("a_0_0", "b_0_0"))
    with pytest.raises(InputError, match="row 1 has uid 'c' but key 'b_0_0'"):
        t.sessions(["a", "c"])
    with pytest.raises(InputError, match="2 TransferQueue keys"):
        t.sessions(["a"])
    with pytest.raises(InputError, match="appears twice"):
        Trajectories(keys=("a_0_0", "a_0_0")).sessions()
    with pytest.raises(InputError, match="shape"):
        Trajectories(keys=("a_0_0",), columns={"x": np.zeros(2)})


def test_scores_column_numbers_none_and_errors():
    np.testing.assert_array_equal(scores_column([1, 0.5, None, True, np.float32(2)], "x"), [1.0, 0.5, np.nan, 1.0, 2.0])
    with pytest.raises(InputError, match="'x' of row 1 is 'high'"):
        scores_column([1.0, "high"], "x")
    with pytest.raises(InputError, match="infinite"):
        scores_column([float("inf")], "x")


def test_using_scopes_the_batch():
    assert current() is None
    t = Trajectories(keys=("a_0_0",))
    with using(t):
        assert current() is t
    assert current() is None
