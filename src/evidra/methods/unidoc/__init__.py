"""UniDoc-RL: search, select one retrieved page, crop it, answer; a dense reward per action type."""

from evidra.methods.unidoc import method  # noqa: F401  (registers the method)
