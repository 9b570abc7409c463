"""The practitioner's app over a page store and its index: ``evidra serve`` and ``evidra mcp``.

- ``workspace``: the store, its index and the model, each used from its own worker thread
  (search, page through a document, answer with streamed text);
- ``uploads``: uploaded files as jobs, written to disk as they arrive and ingested on a thread
  of their own while the app goes on answering (progress, cancel, a cap on uploads in flight);
- ``web``: the starlette app ``evidra serve`` runs on uvicorn: HTML pages (Jinja2 templates,
  no front-end build step), a JSON API, and the OpenAI chat-completions API (``openai_api``),
  every response with the security headers of ``headers``;
- ``mcp_server``: the same workspace as MCP tools (search, page, ask) for agent hosts;
- ``citations``: how an answer's evidence reads (document name, page number, box).

The layer sits above retrieval, models and the ``RAG`` API, below the CLI.
"""
