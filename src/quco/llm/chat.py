"""A model's own chat template, rendered into the raw prompt that text-completion backends take.

Instruction models answer a few-shot extraction prompt far better inside their chat format than as raw text
(the published QuCo-RAG extractor wraps its prompt the same way: one user message, the model's default
template, the generation prompt). The template is read from the loaded model itself: the GGUF metadata for
llama.cpp, the tokenizer for transformers. It is rendered with a sandboxed Jinja2 environment, as
transformers' ``apply_chat_template`` does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from quco.errors import ConfigError

log = logging.getLogger(__name__)

GGUF_TEMPLATE_KEY = "tokenizer.chat_template"


@dataclass(frozen=True)
class ChatFormat:
    """A chat template with the special tokens it may refer to; ``render`` gives the raw prompt text."""

    template: str
    bos_token: str = ""
    eos_token: str = ""
    source: str = ""

    @cached_property
    def _compiled(self) -> Any:
        try:
            from jinja2 import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as exc:  # jinja2 comes with transformers and llama-cpp-python
            raise ConfigError("rendering a chat template needs jinja2: pip install jinja2") from exc

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            return env.from_string(self.template)
        except TemplateError as exc:
            raise ConfigError(
                f"the chat template of {self.source or 'the model'} does not compile: {exc}"
            ) from exc

    def render(self, user: str, system: str | None = None) -> str:
        """One user turn (after an optional system turn), ending where the assistant's reply begins."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]
        return self.render_messages(messages)

    def render_messages(self, messages: list[dict[str, str]]) -> str:
        """A conversation (system, user and assistant turns), ending where the next reply begins."""
        try:
            return self._compiled.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                tools=None,
            )
        except Exception as exc:  # a template may raise on purpose (raise_exception) or fail on our input
            raise ConfigError(f"the chat template of {self.source or 'the model'} failed: {exc}") from exc

    def __call__(self, user: str) -> str:
        return self.render(user)


def chat_format_of(generator: Any) -> ChatFormat | None:
    """The chat format of a loaded generator, or None when it has none or applies it itself.

    An OpenAI-compatible server in chat mode applies the template on its side, so there is nothing to
    render; in completion mode its template is not visible to us.
    """
    name = getattr(generator, "name", "")
    if name == "openai":
        return None
    llama = getattr(generator, "llama", None)
    if llama is not None:
        return _from_llama(llama, getattr(generator, "model_path", "") or "the GGUF model")
    tokenizer = getattr(generator, "tokenizer", None)
    if tokenizer is not None:
        return _from_tokenizer(tokenizer)
    return None


def _from_llama(llama: Any, source: str) -> ChatFormat | None:
    metadata = getattr(llama, "metadata", None) or {}
    template = metadata.get(GGUF_TEMPLATE_KEY)
    if not template:
        return None

    def text_of(token_id: int) -> str:
        if token_id is None or token_id < 0:
            return ""
        try:
            return llama.detokenize([token_id], special=True).decode("utf-8", errors="replace")
        except TypeError:  # an older llama-cpp-python without the 'special' flag
            return llama.detokenize([token_id]).decode("utf-8", errors="replace")

    return ChatFormat(template, text_of(llama.token_bos()), text_of(llama.token_eos()), source)


def _from_tokenizer(tokenizer: Any) -> ChatFormat | None:
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        return None
    return ChatFormat(
        template,
        getattr(tokenizer, "bos_token", None) or "",
        getattr(tokenizer, "eos_token", None) or "",
        getattr(tokenizer, "name_or_path", "") or "the tokenizer",
    )
