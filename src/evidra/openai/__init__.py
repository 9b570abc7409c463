"""The one OpenAI-compatible client: wire format, streamed replies, the HTTP client."""
