"""Served models behind `--endpoint`: an OpenAI-compatible HTTP client for dcode new, edit and repair.

A small public face over private-ish modules (httpx's shape): sse (the event-stream reader), client
(requests, retries, failures as RemoteError), streams (a stream's kind and the live view's Frames),
fill (the request bodies: chat, fill-in-the-middle with a chat fallback) and filler (EndpointFiller,
the dcode.filler.Filler that dcode.flows' new, edit and repair run over). Torch-free: nothing here
loads a model. Knows nothing about argv, the environment or the terminal (dcode.cli.running reads those).
"""

from __future__ import annotations

from dcode.remote.client import Endpoint, RemoteError

__all__ = ["Endpoint", "RemoteError"]
