"""Run one trajectory of evidra's verl tools through verl's own classes (the verl venv runs this
for tests/integrations/test_verl_tools.py): the tools built by verl's loader from the YAML file,
each call dispatched by ``ToolAgentLoop._call_tool`` with a real ``AgentData``, and the reward
computed from the ``extra_fields`` verl hands its reward manager.

    python verl_agent_loop_run.py TOOLS.yaml OUT.json GOLD_PAGE_ID
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.tools.tool_registry import initialize_tools_from_config
from verl_fixtures import CALLS

from evidra.integrations import as_verl_compute_score
from evidra.methods.vragrl.reward import retrieval_reward


async def main(config: str, out: Path, gold: str) -> None:
    tools = initialize_tools_from_config(config)
    loop = object.__new__(ToolAgentLoop)  # only what _call_tool reads of a built loop
    loop.tools = {t.name: t for t in tools}
    loop.max_tool_response_length, loop.tool_response_truncate_side = 4096, "middle"
    create = {"question": "How did revenue grow?", "gold_pages": [gold]}
    agent = AgentData(
        messages=[],
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id="r1",
        tools_kwargs={"search": {"create_kwargs": create}},
    )
    calls, responses = [], []
    for name, args in CALLS:
        call = FunctionCall(name=name, arguments=json.dumps(args))
        response, reward, _ = await loop._call_tool(call, agent.tools_kwargs, agent)
        responses.append(response)
        calls.append(
            {"text": response.text, "reward": reward, "sizes": [list(im.size) for im in response.image or []]}
        )
    extra_info = {**create, **agent.extra_fields}
    result = {
        "base_tool": [isinstance(t, BaseTool) for t in tools],
        "tool_response": all(isinstance(r, ToolResponse) for r in responses),
        "names": [t.name for t in tools],
        "calls": calls,
        "extra_fields": agent.extra_fields,
        "score": as_verl_compute_score(retrieval_reward)("vragrl", "<answer>x</answer>", "x", extra_info)[
            "score"
        ],
    }
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
