"""The one Jinja2 environment behind evidra's HTML reports (evidence viewer, eval report, demo).

Templates live in ``evidra/templates`` (package data, so an installed wheel carries them) and are
rendered with autoescaping on: every string a model or a document controls (answers, questions,
page ids, document names, step text) reaches the page escaped, without a call to remember.
``StrictUndefined`` turns a misspelt variable into an error instead of an empty string.
"""

from __future__ import annotations

import functools

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


@functools.cache
def environment() -> Environment:
    """The shared environment (built once): package templates, autoescape, strict undefined."""
    return Environment(
        loader=PackageLoader("evidra", "templates"),
        autoescape=select_autoescape(
            enabled_extensions=("html", "html.j2"), default_for_string=True, default=True
        ),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **context: object) -> str:
    """``template`` (a file name under ``evidra/templates``) rendered with ``context``."""
    return environment().get_template(template).render(**context)


__all__ = ["environment", "render"]
