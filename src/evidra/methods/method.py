"""What a paper method is: one registered ``Method`` object per paper.

A ``Method`` owns everything that says "this paper": its typed, frozen options class (the
``method:`` section of a recipe, its own fields only), the builder that turns those options and
run ``Resources`` into the ``Task`` the trainer is handed (paradigm, environment, reward, data),
the paradigm its policy writes, the table layout its paper reports, its data-construction steps
(a distillation filter, the ``evidra data`` stages it supports) and its judge prompt. Training,
``evidra eval --method``, ``evidra data``, ``evidra ask --method``, the demo, the framework
adapters and the Python API all take a method from ``METHODS``, so the reward that trains is the
scorer that evaluates.

A method module of this package registers its object when imported; the first lookup imports
every module here and every ``evidra.methods`` entry point of the installed distributions (a
method in a package of its own), so importing one method never imports the others. Checking a
config never loads a model: a model a reward needs (a ColQwen2 similarity, an index) loads on
first use.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import logging
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from evidra.core.config import from_dict
from evidra.core.errors import ConfigError, InvalidInputError, RegistryError
from evidra.core.registry import METHOD_PLUGINS, Registry
from evidra.core.types import Sample
from evidra.rewards.judge_config import JudgeConfig, build_judge, validate_judge
from evidra.rewards.judge_prompts import JUDGE_PROMPTS
from evidra.rewards.judge_protocol import Judge
from evidra.rewards.reward import check_weights as check_reward_weights
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task

if TYPE_CHECKING:
    from evidra.data.construction.distill import Filter
    from evidra.methods.lang2act.paradigm import Tool
    from evidra.methods.lat.similarity import StepSimilarity
    from evidra.retrieval.interfaces import Retriever

__all__ = ["ENTRY_POINT_GROUP", "METHODS", "Method", "Resources", "import_method_module", "merged_weights"]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = METHOD_PLUGINS  # installed packages add methods under this entry-point group
# the modules of this package that define no method (the first lookup imports every other one)
_NOT_METHODS = ("api", "evaluation", "method", "resolve", "scoped")
UNKNOWN_METHOD_FIX = (
    "a method defined in your own module is loaded with --method-module my_pkg.my_method "
    "(from Python: import the module)"
)

O = TypeVar("O")


@dataclass(frozen=True)
class Resources:
    """Services a run hands to a method instead of letting it build them from the config."""

    searcher: Retriever | None = None  # text-to-pages search: vragrl's engine, page ranking
    judge: Judge | None = None  # the answer judge client; None: built from the options' ``judge``
    similarity: StepSimilarity | None = None  # lat's; None: from the options' ``similarity``


# (sample, teacher text, the distillation run's context) -> verdict; see
# ``evidra.data.construction.distill``
DistillFilter: TypeAlias = "Filter"


@dataclass(frozen=True)
class Method(Generic[O]):
    """One paper method. ``build(options, resources)`` gives its ``Task``; everything else is
    what the commands around training need to know about it."""

    name: str
    options: type[O]  # a frozen dataclass: the method's own options (the recipe's method section)
    build: Callable[[O, Resources], Task]
    paradigm: str  # the registered paradigm its policy writes (eval, ask, distillation prompts)
    summary: str = ""  # one line for listings and error messages
    layout: str = "official"  # the eval table layout its paper reports (evidra.eval.tables.LAYOUTS)
    judge_prompt: str = "vragrl"  # its answer judge's prompt: a name in evidra.rewards.judge_prompts
    # the prompt its paper evaluates answers with (evidra eval --judge); "": judge_prompt
    eval_judge_prompt: str = ""
    distill: DistillFilter | None = None  # keeps a teacher trajectory or not (evidra data distill)
    # its distillation re-locates the teacher's boxes with a grounding model (``--annotator``)
    regrounds_boxes: bool = False
    # the ``evidra data`` stages that build its training data: distill, multiexpert, filter, toolbox
    stages: tuple[str, ...] = ("filter",)
    citation: Paper | None = None  # the paper to cite; an export's model card names it

    def __post_init__(self) -> None:
        JUDGE_PROMPTS.get(self.judge_prompt)  # a registered prompt, or "unknown judge prompt ..."
        JUDGE_PROMPTS.get(self.evaluation_judge_prompt)

    @property
    def evaluation_judge_prompt(self) -> str:
        """The judge prompt ``evidra eval --method NAME --judge ...`` asks by default."""
        return self.eval_judge_prompt or self.judge_prompt

    def parse_options(self, section: Mapping[str, object]) -> O:
        """The options of the ``method:`` section (without ``name``): an unknown key is a one-line
        ``ConfigError`` with a "did you mean" and the method's options; types are checked."""
        known = [f.name for f in dataclasses.fields(self.options)]  # type: ignore[arg-type]
        for key in section:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                fix = f"did you mean {close[0]!r}?" if close else "remove it"
                raise ConfigError(
                    f"method.{key} is no option of method {self.name!r}; {fix} "
                    f"(options of {self.name}: {', '.join(known) or 'none'})"
                )
        options = from_dict(self.options, section, "method")
        judge = getattr(options, "judge", None)
        if isinstance(judge, JudgeConfig):
            validate_judge(judge)
        return options

    def task(self, section: Mapping[str, object] | None = None, resources: Resources | None = None) -> Task:
        """The task of this method with the options of ``section`` (checked first)."""
        return self.build(self.parse_options(section or {}), resources or Resources())


class _MethodRegistry(Registry["Method[Any]"]):
    """Methods register themselves when their module is imported; the first lookup imports every
    method module of this package and every ``evidra.methods`` entry point."""

    _loaded = False

    def _load(self) -> None:
        if _MethodRegistry._loaded:
            return
        _MethodRegistry._loaded = True
        package = importlib.import_module("evidra.methods")
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_") and module.name not in _NOT_METHODS:
                importlib.import_module(f"evidra.methods.{module.name}")
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name not in self._items:
                loaded = point.load()  # a module that registers itself, or a Method object
                if isinstance(loaded, Method) and loaded.name not in self._items:
                    self.add(loaded.name, loaded)

    def get(self, name: str) -> Method[Any]:
        self._load()
        if name in self._items:
            return self._items[name]
        close = difflib.get_close_matches(str(name), list(self._items), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(self.names())})"
        raise RegistryError(f"unknown method {name!r}{hint}; {UNKNOWN_METHOD_FIX}")

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items


METHODS: _MethodRegistry = _MethodRegistry("method")


def import_method_module(name: str) -> None:
    """Import module ``name`` (dotted, as ``import`` takes it) so that the methods it defines
    register: ``evidra --method-module my_pkg.my_method``. Importing runs the module's code,
    which is why only the command line names one, never a recipe. A name that is not a module
    name, or a module that fails to import, is a one-line ``ConfigError`` naming it."""
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f"--method-module {name!r} is not a module name: name it as `import` does "
            "(my_pkg.my_method, its folder on PYTHONPATH), not as a file"
        )
    try:
        importlib.import_module(name)
    except (ImportError, SyntaxError) as exc:
        raise ConfigError(
            f"--method-module {name!r} cannot be imported: {type(exc).__name__}: {exc}; "
            "check the name and that its folder is on PYTHONPATH"
        ) from exc
    logger.debug("imported method module %s", name)


def merged_weights(name: str, default: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """The method's default weights with its ``weights`` option over them, each name one of the
    default's components (``evidra.rewards.reward.check_weights``: a "did you mean" otherwise)."""
    try:
        return {**default, **check_reward_weights(weights, tuple(default), name)}
    except InvalidInputError as exc:
        raise ConfigError(f"method.weights: {exc}") from None


def method_judge(config: JudgeConfig, resources: Resources, prompt: str, default: Judge) -> Judge:
    """The answer judge: the one passed in, the configured one, or the method's offline default."""
    if resources.judge is not None:
        return resources.judge
    if config.is_default:
        return default
    return build_judge(config, prompt)


def load_tools(path: str) -> tuple[Tool, ...]:
    """The tools of a ``toolbox`` option (a ``ConfigError`` naming the file when it does not load)."""
    from evidra.methods.lang2act.paradigm import load_toolbox

    try:
        return tuple(load_toolbox(path))
    except InvalidInputError as exc:
        raise ConfigError(f"method.toolbox: {exc}") from None


def page_budget(k: int, index: str, resources: Resources) -> Callable[[list[Sample]], list[Sample]] | None:
    """``Task.select_pages`` for a page budget of ``k``: each sample's top pages, ranked by the
    searcher passed in or ``index`` (opened on first use), else in the sample's order."""
    if k < 0:
        raise ConfigError(f"method.pages_per_question must be >= 0 (0: every page), got {k}")
    if k == 0:
        return None

    def select(samples: list[Sample]) -> list[Sample]:
        from evidra.data.pages import top_pages
        from evidra.retrieval.lifecycle.index_folder import open_searcher

        searcher = resources.searcher or (open_searcher(index) if index else None)
        return top_pages(samples, k, searcher)

    return select
