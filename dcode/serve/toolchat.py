"""A shaped chat's conversation (response_format, tools) -> the text the model reads.

Owns: where the tools go (the model's own chat template when it describes tools and writes calls
as `<tool_call>` JSON: Qwen2.5's, Qwen3's; otherwise dcode's fallback prompt, prompts/tools.txt,
with each tool result as a `<tool_response>` block in a user turn), the instruction a
`response_format` adds (prompts/json-object.txt, json-schema.txt), and a template with no place
for earlier turns (dcode-tiny's), which gets the whole conversation as one message. Messages are
rendered as written: a shaped answer is not a code file, so the code prompt template is not used.
Knows nothing about HTTP or the sampler.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dcode.localfill import template
from dcode.models.base import Denoiser
from dcode.models.chat import render
from dcode.serve.shaping import NO_ARGUMENTS, Shape, Tool

PROBE = Tool("dcode_probe_tool", "", NO_ARGUMENTS)  # a tool whose name no template writes by itself


def native_tools(model: Denoiser) -> bool:
    """Does the model's chat template describe tools itself and ask for `<tool_call>` JSON (as
    Qwen2.5's and Qwen3's do)? Cached on the tokenizer."""
    tokenizer = model.tokenizer
    cached = getattr(tokenizer, "_dcode_native_tools", None)
    if cached is None:
        cached = False
        if getattr(tokenizer, "chat_template", None):
            try:
                text = render(model, [{"role": "user", "content": "hi"}], [PROBE.openai()])
                cached = PROBE.name in text and "<tool_call>" in text
            except Exception:  # a template that refuses `tools` has none
                cached = False
        tokenizer._dcode_native_tools = cached
    return bool(cached)


def instructions(shape: Shape, native: bool) -> str:
    """What dcode tells the model about the answer's shape: the tools (where its template does not)
    and the response_format's JSON."""
    notes = []
    if shape.tools and not native:
        listed = "\n".join(json.dumps(tool.openai(), ensure_ascii=False) for tool in shape.tools)
        notes.append(template("tools").format(tools=listed).strip())
    if shape.format == "json_schema":
        notes.append(template("json-schema").format(schema=json.dumps(shape.schema, ensure_ascii=False)).strip())
    elif shape.format == "json_object":
        notes.append(template("json-object").strip())
    return "\n\n".join(notes)


def response(text: str) -> str:
    """A tool's result as Qwen's templates show one, for a template that has no tool role."""
    return f"<tool_response>\n{text}\n</tool_response>"


def joined(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role as one (a template may want turns to alternate)."""
    out: list[dict[str, Any]] = []
    for message in chat:
        if out and out[-1]["role"] == message["role"]:
            out[-1] = {"role": message["role"], "content": f"{out[-1]['content']}\n\n{message['content']}"}
        else:
            out.append(dict(message))
    return out


def rendered(model: Denoiser, messages: Sequence[tuple[str, str]], shape: Shape) -> str:
    """The conversation with its shape's tools and instructions, in the model's chat template."""
    native = bool(shape.tools) and native_tools(model)
    chat: list[dict[str, Any]] = [{"role": role, "content": text} for role, text in messages]
    if shape.tools and not native:
        chat = [{"role": "user", "content": response(m["content"])} if m["role"] == "tool" else m for m in chat]
    notes = instructions(shape, native)
    if notes and chat[0]["role"] == "system":
        chat[0] = {"role": "system", "content": f"{chat[0]['content']}\n\n{notes}"}
    elif notes:
        chat.insert(0, {"role": "system", "content": notes})
    if not native:
        chat = joined(chat)
    if not getattr(model.tokenizer, "chat_template", None):
        return "\n\n".join(m["content"] for m in chat if m["content"].strip())
    tools = [tool.openai() for tool in shape.tools] if native else None
    whole = render(model, chat, tools)
    if len(chat) == 1 or whole != render(model, chat[-1:], tools):
        return whole
    flat = "\n\n".join(m["content"] for m in chat if m["content"].strip())  # the template reads one message
    return render(model, [{"role": "user", "content": flat}], tools)
