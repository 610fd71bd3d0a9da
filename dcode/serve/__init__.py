"""`dcode serve`: an OpenAI-compatible HTTP server over one model, with dcode's diffusion stream.

wire (the JSON shapes, torch-free), jobs (request bodies -> jobs) and settings (a request's
sampler options, by dcode.options' declarations), conversation (a chat's turns -> the prompt, cut
to fit), replies (a request's stream: fill-in-the-middle, stop strings, events -> chunks),
batching (the model proxy that batches forward passes of requests running together), engine
(workers, queue, cancelling), app (FastAPI routes) and server (uvicorn below HTTP: connection
limits, timeouts, the log, the graceful stop). The command itself is dcode.cli.serving.
"""
