"""The one place a chat template is applied.

The CLI's prompt (dcode.localfill.prompt_ids) and dcode serve's conversations
(dcode.serve.conversation) both render through render(), with the keyword arguments the model's
authors render with (ModelFacts.chat_options: Tiny-A2D's enable_thinking=False), so a model reads
the same turns from either. Torch-free; knows nothing about prompts' wording, sampling or HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dcode.models.base import Denoiser

__all__ = ["render"]


def render(model: Denoiser, chat: Sequence[dict[str, str]], tools: Sequence[dict[str, Any]] | None = None) -> str:
    """The messages in the model's chat template, ready for the assistant's answer; `tools` (OpenAI's
    function tools) as transformers passes them to a template that describes them (Qwen's).
    Example: a Qwen3 A2D model -> '...<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'."""
    options: dict[str, Any] = dict(model.facts.chat_options)
    if tools:
        options["tools"] = list(tools)
    text = model.tokenizer.apply_chat_template(list(chat), tokenize=False, add_generation_prompt=True, **options)
    return str(text)
