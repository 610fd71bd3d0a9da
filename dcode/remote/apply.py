"""`dcode edit` through a server's apply path (/v1/apply/completions: Inception's Mercury Edit, dcode
serve), with the fill-in-the-middle or chat path of dcode.remote.fill where it does not serve.

The request is Mercury Edit's (docs.inceptionlabs.ai, the Apply-Edit example): one user message
holding the region to rewrite between <|original_code|> tags and the update between
<|update_snippet|> tags; the answer is a chat completion whose message is the merged code.
Owns: which edits go there (an update snippet, dcode.snippets.is_snippet, on any server; a prose
instruction on a whole file too, except on Inception's host, whose model merges code and does not
follow prose: a dcode server rewrites the file with it, as a local edit does), and falling back
once, silently, to dcode.remote.fill.middle when the server has no such path (404, 405, 501),
remembered on the Endpoint so later edits of the run go there at once. Knows nothing about files
or the terminal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from dcode.events import Drawn
from dcode.remote import fill
from dcode.remote.client import Endpoint, RemoteError
from dcode.remote.fill import Sampling
from dcode.remote.streams import Answer
from dcode.snippets import is_snippet

PATH = "/apply/completions"
NO_APPLY = (404, 405, 501)  # a server without the path (dcode serve before it, vLLM, SGLang, transformers serve)
INCEPTION_EDIT_MODEL = "mercury-edit"  # Inception's model for /v1/apply, /v1/edit and /v1/fim (its docs' examples)


def content(original: str, snippet: str) -> str:
    """The apply request's user message, tagged as Inception's examples lay it out."""
    return f"<|original_code|>\n{original}\n<|/original_code|>\n\n<|update_snippet|>\n{snippet}\n<|/update_snippet|>"


def wanted(endpoint: Endpoint, old: str, instruction: str, whole: bool) -> bool:
    """Whether this edit goes to the apply path: one the server is not known to lack, a region with
    code in it, and an update snippet, or a prose instruction on the whole file (not to Inception)."""
    if PATH in endpoint.missing or not old.strip():
        return False
    return is_snippet(instruction) or (whole and not endpoint.inception)


def applied(endpoint: Endpoint, old: str, snippet: str, language: str, sampling: Sampling) -> Iterator[Drawn | Answer]:
    """The region's code with the snippet merged in, streamed from the apply path."""
    model = endpoint.model or (INCEPTION_EDIT_MODEL if endpoint.inception else fill.model_of(endpoint))
    messages = [{"role": "user", "content": content(old, snippet)}]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True, **sampling.fields()}
    for event in fill.answer(endpoint, PATH, body, "append", language):
        yield replace(event, text=fill.unfence(event.text)) if isinstance(event, Answer) else event


def region(
    endpoint: Endpoint,
    before: str,
    old: str,
    after: str,
    language: str,
    sampling: Sampling,
    instruction: str,
    name: str,
) -> Iterator[Drawn | Answer]:
    """The region's new text: from the apply path when wanted() says so and the server has it,
    else (and from then on, for a server that answered NO_APPLY) dcode.remote.fill.middle's."""
    if wanted(endpoint, old, instruction, not before and not after):
        try:
            yield from applied(endpoint, old, instruction, language, sampling)
            return
        except RemoteError as error:  # nothing was drawn yet: a refusal comes before any chunk
            if error.status not in NO_APPLY or "model" in error.named:  # a 404 for the model is the user's to fix
                raise
            endpoint.missing.add(PATH)
    yield from fill.middle(endpoint, before, after, language, sampling, old=old, instruction=instruction, name=name)
