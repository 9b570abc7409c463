"""Text as it is generated: a transformers streamer that hands each new piece of text to a callback.

transformers' ``generate`` calls ``put`` with the prompt ids first, then with each new token;
``TextCallback`` decodes the tokens so far (special tokens kept, end-of-turn tokens dropped, as
``Generation.text`` is decoded) and hands on what is new, holding back a piece that ends inside
a multi-byte character (decoded as U+FFFD until its last byte arrives). The
callback may raise (e.g. ``StreamCancelled`` when the reader left): generation stops there.

>>> class Chars:  # a tokenizer whose token ids are code points
...     def decode(self, ids, skip_special_tokens=False): return "".join(map(chr, ids))
>>> got = []
>>> stream = TextCallback(Chars(), got.append)
>>> for ids in ([104, 105], [72], [111], [33]): stream.put(ids)   # the prompt "hi", then "Ho!"
>>> stream.end(); got
['H', 'o', '!']
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.models.hf_types import Tokenizer

OnText = Callable[[str], None]


class StreamCancelled(Exception):
    """Raised by an ``OnText`` callback to stop generation (its reader is gone)."""


class TextCallback:
    """A transformers streamer (``put``/``end``) calling ``on_text`` with each new piece of text."""

    def __init__(self, tokenizer: Tokenizer, on_text: OnText, end_ids: Collection[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.end_ids = frozenset(end_ids)
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text handed on so far
        self._prompt_seen = False

    def put(self, value: Tensor | Sequence[int]) -> None:
        ids = value.reshape(-1).tolist() if hasattr(value, "reshape") else list(value)
        if not self._prompt_seen:  # the first call carries the prompt
            self._prompt_seen = True
            return
        self.ids.extend(int(i) for i in ids if int(i) not in self.end_ids)
        text = self._decode()
        if text.endswith("\ufffd"):
            return  # a character split across tokens: wait for the rest
        self._send(text)

    def end(self) -> None:
        self._send(self._decode())

    def _decode(self) -> str:
        return str(self.tokenizer.decode(self.ids, skip_special_tokens=False))

    def _send(self, text: str) -> None:
        if len(text) > self.sent:
            piece, self.sent = text[self.sent :], len(text)
            self.on_text(piece)
