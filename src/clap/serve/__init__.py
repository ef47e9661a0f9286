"""`clap serve`: the adapter in prod (or any registered version) behind an OpenAI-compatible HTTP API.

`batcher` decodes requests together on the engine's own loop (a request joins the running batch at its next step,
or with static batching the requests that arrive together form one batch); `app` is the FastAPI
application (`/v1/chat/completions`, `/v1/completions`, `/v1/models`); `openai_api` holds the request and response
shapes. It sits above evaluate (the engine) and release (the verified adapter it loads).
"""
