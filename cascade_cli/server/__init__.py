"""`cascade serve`: an OpenAI-compatible HTTP server around the prompt service.

The HTTP side (FastAPI on uvicorn) validates requests and shapes responses; every generation
runs on one worker thread that owns the model, its context and the store (see worker.py).
"""

from cascade_cli.server.app import create_app
from cascade_cli.server.worker import Backend, Worker

__all__ = ["Backend", "Worker", "create_app"]
