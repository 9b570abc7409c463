"""The search service (``evidra serve-index``): its app, server, terms and clients."""
