"""Served models behind `--endpoint`: an OpenAI-compatible HTTP client for dcode new, edit and repair.

A small public face over private-ish modules (httpx's shape): sse (the event-stream reader), client
(requests, retries, failures as RemoteError), streams (a stream's kind and the live view's Frames),
fill (fill-in-the-middle, with a chat fallback) and flows (new, edit and repair as streams of
events, rewriting the spans dcode.spans picks). Torch-free: nothing here loads a model. Knows nothing about
argv, the environment or the terminal (dcode.cli.remote reads those).
"""

from __future__ import annotations

from dcode.remote.client import Endpoint, RemoteError

__all__ = ["Endpoint", "RemoteError"]
