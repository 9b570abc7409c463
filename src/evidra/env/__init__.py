"""Episode environments: the prompt, each observation, and when an episode ends."""

from evidra.env import search, zoom  # noqa: F401  (register search, zoom)
from evidra.env.environment import ENVIRONMENTS, Environment, StepInfo, StepResult
from evidra.env.single_turn import SingleTurnEnv
from evidra.env.toy import KeyValueEnv

__all__ = ["ENVIRONMENTS", "Environment", "KeyValueEnv", "SingleTurnEnv", "StepInfo", "StepResult"]
