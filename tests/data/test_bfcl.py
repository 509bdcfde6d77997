"""BFCL prompts: categories, columns, schemas in the prompt, OpenAI-style tools."""

import json
import os
import shutil

import pytest

from mrgrpo.data.bfcl import bfcl_data_dir, load_bfcl, openai_tool


@pytest.fixture(scope="module")
def small():
    return load_bfcl(limit=3)


def test_each_category_loads_its_own_file(small):
    from mrgrpo.data.bfcl import CATEGORIES

    assert small["category"] == [c for c in CATEGORIES for _ in range(3)]
    assert "live_simple" in CATEGORIES and "live_parallel_multiple" in CATEGORIES
    assert [i.rsplit("_", 1)[0] for i in small["id"]] == small["category"]


def test_rows_carry_schemas_in_the_system_prompt_and_answers_as_json(small):
    row = small[0]
    assert row["id"] == "simple_python_0"
    functions, answer = json.loads(row["functions"]), json.loads(row["ground_truth"])
    assert functions[0]["name"] == "calculate_triangle_area"
    assert answer == [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]
    system, user = row["prompt"]
    assert system["role"] == "system" and json.dumps(functions[0]) in system["content"]
    assert "<think></think>" in system["content"] and "<tool_call></tool_call>" in system["content"]
    assert user == {"role": "user", "content": "Find the area of a triangle with a base of 10 units and height of 5 units."}
    assert "<think>" not in load_bfcl(["simple"], limit=1, think=False)[0]["prompt"][0]["content"]


def test_tools_use_json_schema_types():
    tool = openai_tool({"name": "f", "parameters": {"type": "dict", "properties": {
        "x": {"type": "float"}, "p": {"type": "tuple", "items": {"type": "float"}}, "d": {"type": "any"}}}})
    assert tool["type"] == "function"
    params = tool["function"]["parameters"]
    assert params["type"] == "object"
    assert params["properties"] == {"x": {"type": "number"}, "p": {"type": "array", "items": {"type": "number"}}, "d": {"type": "string"}}


def test_a_local_directory_with_the_bfcl_layout_works(tmp_path):
    source = bfcl_data_dir()
    (tmp_path / "possible_answer").mkdir()
    for name in ("BFCL_v3_parallel.json", "possible_answer/BFCL_v3_parallel.json"):
        shutil.copy(os.path.join(source, name.replace("v3", "v4")), tmp_path / name)
    data = load_bfcl(["parallel"], data_dir=str(tmp_path), limit=2)
    assert data["id"] == ["parallel_0", "parallel_1"]
    with pytest.raises(FileNotFoundError):
        load_bfcl(["multiple"], data_dir=str(tmp_path))
