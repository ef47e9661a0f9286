"""`clap serve`: the adapter in prod (or any registered version) behind an OpenAI-compatible HTTP API.

`batcher` decodes requests that arrive together in one batch of the engine's own loop; `app` is the FastAPI
application (`/v1/chat/completions`, `/v1/completions`, `/v1/models`); `openai_api` holds the request and response
shapes. It sits above evaluate (the engine) and release (the verified adapter it loads).
"""
