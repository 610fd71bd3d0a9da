"""`dcode serve`: an OpenAI-compatible HTTP server over one model, with dcode's diffusion stream.

wire (the JSON shapes, torch-free), jobs (request bodies -> jobs), batching (the model proxy that
batches forward passes of requests running together), engine (workers, queue, events -> chunks)
and app (FastAPI routes). The command itself is dcode.cli.serving.
"""
