"""ReAct RAG and Search-R1(-VL): think, then search or answer (VRAG-RL App. I.2-I.3, Figure 10).

The prompt baseline of VRAG-RL: the same multi-turn loop as the search agent but without the
``<bbox>`` crop action. ReAct RAG uses the Search-R1 prompt verbatim (App. I.3), so both names
register the same paradigm; run it in ``evidra.env.search.SearchEnv`` with crops disabled.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidra.paradigms.paradigm import PARADIGMS
from evidra.paradigms.search_agent import SearchAgent

# VRAG-RL, Appendix I.2 (Figure 10), system prompt verbatim.
SEARCH_R1_SYSTEM = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can call "
    "a search engine by <search> query </search> and user will return the searched results. You can "
    "search as many times as your want. If you find no further external knowledge needed, you can "
    "directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>."
)


@dataclass(frozen=True)
class ReAct(SearchAgent):
    """Search-R1 / ReAct RAG: ``<search>`` and ``<answer>`` only; prompt, parser and rewards
    are the search agent's otherwise."""

    name: str = "react"
    system_prompt: str = SEARCH_R1_SYSTEM
    actions: tuple[str, ...] = ("search", "answer")


PARADIGMS.add("react", ReAct)
PARADIGMS.add("search_r1", lambda: ReAct(name="search_r1"))
