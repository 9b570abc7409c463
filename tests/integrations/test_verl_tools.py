"""evidra's environments as verl tools (``evidra.integrations.verl_tools``).

Without verl, the calls verl 0.9.1's tool agent loop makes, in its order (``ToolAgentLoop._call_tool``
for a ``BaseTool``: ``create(create_kwargs=...)`` -> ``execute(instance_id, args, agent_data=...)``
-> ``release(instance_id)``, one instance per call, the trajectory's ``AgentData`` passed along).
With verl's own classes, the same trajectory runs in a subprocess of the verl venv
(``make test-verl``), skipped where that venv is absent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from verl_fixtures import CALLS, make_store

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.integrations import as_verl_compute_score
from evidra.integrations.verl_tools import (
    EPISODES_ATTRIBUTE,
    VERL_AVAILABLE,
    CropTool,
    SearchTool,
    ZoomTool,
    openai_schema,
    tool_config,
    write_tool_config,
)
from evidra.methods.vragrl.reward import retrieval_reward

ROOT = Path(__file__).resolve().parents[2]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
NDCG_RANK_2 = 1 / math.log2(3)  # VRAG-RL Eq. 7-9: the one gold page retrieved second


class AgentData:
    """What verl's ``AgentData`` offers a tool: the trajectory's ``extra_fields`` and request id."""

    def __init__(self, tools_kwargs: dict[str, Any]) -> None:
        self.extra_fields: dict[str, Any] = {}
        self.request_id = "trajectory-1"
        self.tools_kwargs = tools_kwargs


async def call_tool(tools: dict[str, Any], name: str, args: Any, agent: AgentData) -> tuple[Any, float, dict]:
    """verl 0.9.1 ``ToolAgentLoop._call_tool``, BaseTool branch: one instance per call."""
    tool = tools[name]
    instance_id, _ = await tool.create(
        create_kwargs=agent.tools_kwargs.get(name, {}).get("create_kwargs", {})
    )
    try:
        return await tool.execute(instance_id, args, agent_data=agent)
    finally:
        await tool.release(instance_id)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("verl")
    return root / "store", make_store(root)


def _tools(store: Path, penalty: float = 0.0) -> dict[str, Any]:
    shared = {"type": "native", "invalid_penalty": penalty}
    tools = [SearchTool({**shared, "store": str(store)}), CropTool(shared)]
    return {t.name: t for t in tools}


def test_schemas_and_the_tool_config_verl_reads(tmp_path: Path) -> None:
    assert openai_schema(CropTool.spec) == {
        "type": "function",
        "function": {
            "name": "bbox",
            "description": "Crop and zoom into a region of the last image shown.",
            "parameters": {
                "type": "object",
                "properties": {
                    "box": {
                        "type": "array",
                        "description": CropTool.spec.params["box"][1],
                        "items": {"type": "integer"},
                    }
                },
                "required": ["box"],
            },
        },
    }
    search = {"index": "http://127.0.0.1:1/", "store": "s/"}
    path = write_tool_config(
        tmp_path / "tools.yaml", {"search": search, "crop": {}, "zoom": {"image_root": str(tmp_path)}}
    )
    entries = yaml.safe_load(path.read_text())["tools"]
    assert [e["class_name"] for e in entries] == [
        "evidra.integrations.verl_tools.SearchTool",
        "evidra.integrations.verl_tools.CropTool",
        "evidra.integrations.verl_tools.ZoomTool",
    ]
    assert [e["config"]["type"] for e in entries] == ["native"] * 3  # verl's ToolType
    assert [e["tool_schema"]["function"]["name"] for e in entries] == ["search", "bbox", "image_zoom_in_tool"]
    with pytest.raises(ConfigError, match=r"unknown keys \['indx'\]"):
        tool_config({"search": {"indx": "x"}})
    with pytest.raises(ConfigError, match=r"needs index .* or store"):
        tool_config({"search": {}})
    with pytest.raises(ConfigError, match="unknown evidra verl tool 'ocr'"):
        tool_config({"ocr": {}})
    renamed = {**openai_schema(CropTool.spec)}
    renamed["function"] = {
        **renamed["function"],
        "parameters": {"type": "object", "properties": {"bbox": {"type": "array"}}},
    }
    with pytest.raises(ConfigError, match=r"parameters \['bbox'\] must be \['box'\]"):
        CropTool({"type": "native"}, renamed)
    # a hand-written schema that is not one: one line naming it, with verl installed or not
    untyped = {**renamed, "function": {**renamed["function"], "parameters": {"properties": {"box": {}}}}}
    no_type = {k: v for k, v in renamed.items() if k != "type"}
    no_description = {
        **renamed,
        "function": {k: v for k, v in renamed["function"].items() if k != "description"},
    }
    for bad in (untyped, no_type, no_description, {"type": "function"}, {"function": {"name": 3}}):
        with pytest.raises(ConfigError, match=r"^tool_schema.*openai_schema\(Tool\.spec\)"):
            CropTool({"type": "native"}, bad)


class _DumpsNoFunction:
    """A schema object (not a dict) whose dump holds no ``function``."""

    def model_dump(self, *, exclude_unset: bool = False, exclude_none: bool = False) -> dict[str, object]:
        return {"type": "function"}


def test_a_schema_object_without_parameters_or_a_bad_penalty_is_one_config_line() -> None:
    with pytest.raises(ConfigError, match=r"parameters \[\] must be \['box'\]"):
        CropTool({"type": "native"}, _DumpsNoFunction())
    for penalty in ("high", [1], None):
        with pytest.raises(ConfigError, match=r"^invalid_penalty must be a number, got "):
            CropTool({"type": "native", "invalid_penalty": penalty})
    assert CropTool({"type": "native", "invalid_penalty": "-0.5"}).invalid_penalty == -0.5


@pytest.mark.skipif(VERL_AVAILABLE, reason="the plain classes are used only where verl is not installed")
def test_one_trajectory_through_the_agent_loops_calls(store: tuple[Path, dict[str, str]]) -> None:
    path, ids = store
    tools = _tools(path, penalty=-0.05)
    agent = AgentData(
        {"search": {"create_kwargs": {"question": "How did revenue grow?", "gold_pages": [ids["A"]]}}}
    )

    async def run() -> list[tuple[Any, float, dict]]:
        early = await call_tool(tools, "bbox", {"box": [1, 2, 3, 4]}, agent)  # no search yet
        return [early] + [await call_tool(tools, name, args, agent) for name, args in CALLS]

    early, search_c, crop, search_a, bad_box, no_query = asyncio.run(run())
    assert "search tool first" in early[0].text and early[1] == -0.05
    # a search answers with the page image, displayed as VRAG-RL's process_image resizes it: 600 x 800
    # is above 512*28*28 pixels, so both sides shrink by sqrt(401408 / 480000): (548, 731)
    assert search_c[0].text is None and [im.size for im in search_c[0].image] == [(548, 731)]
    assert search_c[1:] == (0.0, {"invalid": False, "done": False})
    # the crop maps [100, 100, 300, 400] of the 548 x 731 frame to page pixels (109, 109, 328, 437),
    # 219 x 328, below 256*28*28 pixels: it grows by sqrt(200704 / 71832) to (366, 548)
    assert [im.size for im in crop[0].image] == [(366, 548)]
    assert [im.size for im in search_a[0].image] == [(548, 731)]
    assert bad_box[0].text.startswith("Invalid call of bbox: expected arguments box (array)")
    assert no_query[0].text.startswith("Invalid call of search") and no_query[1] == -0.05
    episode = getattr(agent, EPISODES_ATTRIBUTE)["search"].episode
    assert [i.page_id for i in episode.infos] == [ids["C"], ids["C"], ids["A"]]
    assert agent.extra_fields == {
        "retrieved_pages": [ids["C"], ids["A"]],
        "evidra_tool_calls": 6,
        "evidra_invalid_tool_calls": 3,
    }
    # the episode's step rewards: the bad box and the empty search (the early crop preceded it)
    assert asyncio.run(tools["search"].calc_reward("any", agent_data=agent)) == pytest.approx(-0.1)
    # verl's reward manager merges extra_fields into extra_info; evidra's adapter scores them
    score = as_verl_compute_score(retrieval_reward)
    extra_info = {**agent.tools_kwargs["search"]["create_kwargs"], **agent.extra_fields}
    assert score("vragrl", "<answer>10%</answer>", "10%", extra_info)["score"] == pytest.approx(NDCG_RANK_2)
    assert not tools["search"]._created and not tools["bbox"]._created  # every instance released


@pytest.mark.skipif(VERL_AVAILABLE, reason="the plain classes are used only where verl is not installed")
def test_instance_keyed_trajectories_and_the_zoom_tool(
    store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """A loop that creates one instance per trajectory (its id reused by every tool, kwargs
    spread) and passes no agent_data; two such trajectories do not share an episode."""
    from PIL import Image

    path, _ = store
    tools = _tools(path)
    Image.new("RGB", (800, 600), "white").save(tmp_path / "page.png")
    zoom = ZoomTool({"type": "native", "image_root": str(tmp_path)})

    async def run() -> tuple[Any, ...]:
        for tool in (*tools.values(), zoom):
            for rid in ("t1", "t2"):
                await tool.create(rid, question="Q?", image="page.png")
        first = await tools["search"].execute("t1", {"query": "headcount"})
        other = await tools["search"].execute("t2", {"query": "headcount"})
        crop = await tools["bbox"].execute("t1", {"box": [0, 0, 274, 365]})
        zoomed = await zoom.execute("t1", {"bbox_2d": [0, 0, 400, 300]})
        outside = await zoom.execute("t2", {"bbox_2d": [900, 700, 950, 750]})
        for tool in (*tools.values(), zoom):
            for rid in ("t1", "t2"):
                await tool.release(rid)
        return first, other, crop, zoomed, outside

    first, other, crop, zoomed, outside = asyncio.run(run())
    assert first[0].image and other[0].image  # each trajectory sees headcount's page B first
    assert crop[0].image and crop[2]["invalid"] is False
    # CAVE's zoom: a 400 x 300 region, below the minimum pixels, enlarged by sqrt(200704 / 120000)
    assert [im.size for im in zoomed[0].image] == [(517, 387)] and zoomed[0].text is None
    assert "lies outside the 800x600 image" in outside[0].text and outside[2]["invalid"] is True
    with pytest.raises(InvalidInputError, match="outside the zoom tool's image_root"):
        asyncio.run(_zoom_outside(zoom))


async def _zoom_outside(zoom: ZoomTool) -> None:
    iid, _ = await zoom.create(create_kwargs={"question": "Q?", "image": "../elsewhere.png"})
    await zoom.execute(iid, {"bbox_2d": [0, 0, 1, 1]})


@pytest.mark.slow  # importing verl (and ray) in the subprocess takes most of its ~30 s
def test_with_verls_own_classes(store: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    if not VERL_PYTHON.exists():
        pytest.skip(f"no verl venv at {VERL_PYTHON.relative_to(ROOT)}; `make test-verl` builds it")
    path, ids = store
    tools = {"search": {"store": str(path), "invalid_penalty": -0.05}, "crop": {"invalid_penalty": -0.05}}
    config = write_tool_config(tmp_path / "tools.yaml", tools)
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    script = Path(__file__).with_name("verl_agent_loop_run.py")
    proc = subprocess.run(
        [str(VERL_PYTHON), str(script), str(config), str(out), ids["A"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["base_tool"] == [True, True] and result["tool_response"] is True
    assert result["names"] == ["search", "bbox"]
    assert [r["sizes"] for r in result["calls"]] == [[[548, 731]], [[366, 548]], [[548, 731]], [], []]
    assert [r["reward"] for r in result["calls"]] == [0.0, 0.0, 0.0, -0.05, -0.05], result["calls"]
    assert result["extra_fields"]["retrieved_pages"] == [ids["C"], ids["A"]]
    assert result["score"] == pytest.approx(NDCG_RANK_2)
