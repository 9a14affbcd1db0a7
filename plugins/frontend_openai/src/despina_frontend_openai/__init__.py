"""Despina's OpenAI-compatible frontend (``despina-frontend-openai``): Triton's OpenAI
frontend's endpoints and flags, served on the Despina server's event loop."""
